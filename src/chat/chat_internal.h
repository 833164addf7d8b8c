/* What the chat module's files share: Python's json.dumps (the templates' tojson) over raw JSON text,
 * so that numbers keep what the client wrote. */
#ifndef SD_CHAT_INTERNAL_H
#define SD_CHAT_INTERNAL_H

#include <stddef.h>

/* Python's json.dumps(json.loads(text)) as Hugging Face's tojson filter calls it (ensure_ascii off,
 * keys in their order): separators ", " and ": ", or with indent >= 0 that many spaces per level,
 * "," and ": ". Integers as written (-0 as 0), other numbers as Python's repr of the double. The text
 * must be one JSON value (whitespace around it is fine). malloc'd, NUL-terminated (*out_len bytes);
 * NULL when out of memory or when text is not JSON. */
char *chat_pyjson(const char *text, size_t len, int indent, size_t *out_len);

/* Python's json.dumps of a str: text (UTF-8, n bytes) quoted, with the escapes Python writes
 * (\" \\ \n \r \t \b \f, \u00XX for other control characters). malloc'd; NULL when out of memory. */
char *chat_pystring(const char *text, size_t n, size_t *out_len);

#endif
