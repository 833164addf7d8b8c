/* Includes SD_NB_BODY (a file name in quotes) once for each token count NB = 1..9: the kernel
 * bodies of quant_avx512_nb.h and quant_avx2_nb.h are templates over NB, so that every loop over
 * the tokens has a constant bound. The including file defines NBF and the other names the body
 * uses; no include guard, as each use instantiates a body. */
#define NB 1
#include SD_NB_BODY
#undef NB
#define NB 2
#include SD_NB_BODY
#undef NB
#define NB 3
#include SD_NB_BODY
#undef NB
#define NB 4
#include SD_NB_BODY
#undef NB
#define NB 5
#include SD_NB_BODY
#undef NB
#define NB 6
#include SD_NB_BODY
#undef NB
#define NB 7
#include SD_NB_BODY
#undef NB
#define NB 8
#include SD_NB_BODY
#undef NB
#define NB 9
#include SD_NB_BODY
#undef NB
_Static_assert(SD_R16_MAX_TOKENS == 9, "one instantiation of SD_NB_BODY per token count");
