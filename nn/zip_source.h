/* Private to nn/: a libzip source that reads a regular file by pread
 * through a window of its own (nn/zip_source.c), for the .npz reader.
 *
 * libzip's stdio source seeks before every read (fseeko, a system call
 * each: an entry's local header is read at open for ZIP_CHECKCONS, and
 * again with its data), so an archive of n small entries cost about 4n
 * system calls; here a read the window holds is a memcpy, and the window
 * is refilled by one pread, which moves no file offset. */
#ifndef TAPEGRAD_NN_ZIP_SOURCE_H
#define TAPEGRAD_NN_ZIP_SOURCE_H

#include "core/error.h"

#include <stdint.h>
#include <stdio.h>
#include <zip.h>

/* A source over f (size bytes; the caller has checked it is a regular
 * file), which it owns from here on: closed when libzip frees the source,
 * and here when no source can be made (NULL, out of memory). */
TG_HIDDEN zip_source_t *tg__zip_source_pread(FILE *f, uint64_t size);

#endif /* TAPEGRAD_NN_ZIP_SOURCE_H */
