/* The one copy of: reading a whole file, mapping one read-only, memory in huge pages, and the
 * monotonic clock. */
#ifndef SD_CORE_IO_H
#define SD_CORE_IO_H

#include <stddef.h>

#include "specdec/status.h"

/* Reads a regular file whole into a malloc'd, NUL-terminated buffer (*len excludes the NUL).
 * Files larger than max bytes are refused (SD_ERR_FORMAT naming the size); max 0 means no limit.
 * Errors name the path and the reason. */
sd_status sd_file_read(const char *path, size_t max, char **buf, size_t *len);

/* Maps a regular file read-only; an empty file gives *map = NULL, *len = 0. */
sd_status sd_file_map(const char *path, void **map, size_t *len);
void sd_file_unmap(void *map, size_t len); /* NULL is fine */

/* Memory a pass streams through (weights, KV caches): 2 MiB-aligned, the size rounded up to 2 MiB,
 * and advised into 2 MiB pages, since in 4 KiB pages every 4 KiB read is a TLB miss. Where
 * transparent huge pages are off, or on only for madvise'd memory, the advice is what asks for
 * them; failing it leaves 4 KiB pages. NULL when out of memory; free() releases it. */
void *sd_huge_alloc(size_t bytes);

/* Seconds on the monotonic clock. */
double sd_now(void);

#endif
