/* Private to libtapegrad: what core offers the floors above ops (nn, plot)
 * beyond the public API, each for a named use. Like core/error.h it sees
 * tensors only as the public API's opaque pointers. */
#ifndef TAPEGRAD_SHARED_H
#define TAPEGRAD_SHARED_H

#include "core/error.h"

/* Drops a reference the library retained itself (a tape entry's input, an
 * optimizer's parameter). Unlike tg_release it never takes t out of its
 * scope: the scope's reference is someone else's. (core/tensor.c) */
TG_HIDDEN void tg__drop(tg_tensor *t);

/* The index of the first of n TG_BOOL bytes that is not 0 or 1, or -1:
 * what enters a bool tensor from outside (tg_from_data, tg_copy_in, the
 * npy and safetensors loaders) is checked with it, so the library may take
 * every bool as 0 or 1 (ops/compare.c looks a bool's answer up).
 * (core/tensor.c) */
TG_HIDDEN int64_t tg__bad_bool(const uint8_t *b, int64_t n);

/* dst = src elementwise, src broadcast to dst's shape; converts dtypes. No
 * tape entry: for checkpoint loading, which writes parameters in place.
 * (core/iter.c) */
TG_HIDDEN void tg__copy_into(tg_tensor *dst, const tg_tensor *src);

/* ---- Writing a tensor in place (core/inplace.c) ------------------------
 * The in-place calls' two guards, for every other write of a tensor the
 * user holds (the optimizer step, the checkpoint loaders):
 *
 *   for each t: if (!tg__write_check(op, t)) return -1;   (all first, so
 *   for each t: write it; tg__write_done(t);               a refusal
 *                                                          changes nothing)
 *
 * tg__write_check is false, with an error "<op>: ..." naming the tape entry
 * and its call site, when a live tape entry holds t's storage for a
 * backward still to run (that backward would read the new values), when t
 * is the output of an op on the tape with grad mode on, or when t is a
 * broadcast view (its elements overlap); and for a NULL or released t.
 * tg__write_done adds one to the version of t's storage, which the tape
 * entries compare when a backward starts. */
TG_HIDDEN bool tg__write_check(const char *op, tg_tensor *t);
TG_HIDDEN void tg__write_done(tg_tensor *t);
/* Where t's elements start, when t is contiguous (C order) and of dtype
 * dt; else NULL. For the checkpoint readers, which read a file's bytes
 * straight into a tensor rather than through a buffer and a copy: a
 * tensor the user holds is written between the two guards above. */
TG_HIDDEN void *tg__contiguous_bytes(tg_tensor *t, tg_dtype dt);
/* A new contiguous tensor whose elements are not set (torch.empty), for a
 * loader that writes every one before anyone reads it: memory touched once
 * by the writes rather than also by zeroing. NULL with an error naming op
 * on a bad shape or no memory. (core/tensor.c) */
TG_HIDDEN tg_tensor *tg__empty(const char *op, tg_dtype dt, int ndim,
                               const int64_t *shape);

/* Sum of g's squared elements, in double: in fixed blocks shared among the
 * threads, so the same bits with any thread count. For the tape's |grad|
 * and clip_grad_norm. (core/tape_print.c) */
TG_HIDDEN double tg__sum_squares(const tg_tensor *g);

/* ---- Reading a file (core/file.c) ----------------------------------- */

/* Opens path for reading, for the loaders: never blocks in the open (a FIFO
 * with no writer, a device waiting for a peer) and refuses anything but a
 * regular file, whose size is then a real bound on what it holds. Returns
 * the stream (the caller fcloses it) with the size in *size; or NULL with
 * the error "<op>: <path>: cannot open: <strerror>", "... cannot stat: ..."
 * or "<op>: <path>: not a regular file". */
TG_HIDDEN FILE *tg__file_open_regular(const char *op, const char *path,
                                      int64_t *size);

/* ---- Writing a file safely (core/file.c) -------------------------------
 * For every file the library writes (.npy, .npz, .safetensors, plot data
 * and scripts): the bytes go to a temporary in the target's directory,
 * unnamed where the file system allows (O_TMPFILE), else ".<name>.XXXXXX",
 * which tg__file_commit syncs, names ".<name>.XXXXXX" if it had no name,
 * and renames over the target. So on any failure (a full disk, a file-size
 * limit, an unwritable directory, a format limit the caller finds midway)
 * the old file is byte for byte as it was and no temporary is left; a
 * process killed midway (SIGXFSZ at its default action, SIGKILL) leaves
 * the old file too, and no temporary when it had no name; one that had is
 * removed by the next save of the target that succeeds. A
 * new file gets the mode any new file gets (0666 less the umask), a
 * replaced one keeps its mode (and its owner, when we may give it away). A
 * symbolic link is kept and what it points to is replaced; a hard link to
 * the old file keeps the old bytes. An existing target that is not a
 * regular file (a device such as /dev/null, a pipe) is written in place,
 * without a temporary; a directory is an error.
 *
 * Errors read "<op>: cannot write <path>: <what failed>: <strerror>", with
 * the path as the caller gave it. Use:
 *
 *   tg__file *out = tg__file_begin("save_npy", path);
 *   if (!out) return -1;
 *   if (!tg__file_write(out, bytes, n) || ...) { tg__file_abort(out);
 *                                                return -1; }
 *   return tg__file_commit(out);                                          */
typedef struct tg__file tg__file;

/* Starts writing path for op. Returns the handle, or NULL with the error set
 * (the temporary cannot be created, the target is a directory). */
TG_HIDDEN tg__file *tg__file_begin(const char *op, const char *path);
/* The stream to write to, for fprintf and the like: a failure there shows
 * in ferror, which tg__file_commit checks. Closed by commit or abort. */
TG_HIDDEN FILE *tg__file_stream(tg__file *w);
/* Writes n bytes; false with the error set ("write failed") when they do
 * not all go, and after that every call is false and commit fails. */
TG_HIDDEN bool tg__file_write(tg__file *w, const void *buf, size_t n);
/* Flushes, syncs and closes the temporary and renames it over the target,
 * then syncs the directory. 0; or -1 with the error set and the target as
 * it was, except when only the directory's sync fails (the new file is in
 * place then, and the message says so). Frees w either way. */
TG_HIDDEN int tg__file_commit(tg__file *w);
/* Gives up: closes and removes the temporary, leaving the target as it was
 * and the error as it is. Frees w. NULL-safe. */
TG_HIDDEN void tg__file_abort(tg__file *w);
/* The end of every save: for a NULL w (tg__file_begin failed) -1; when ok,
 * tg__file_commit; else tg__file_abort and -1. */
TG_HIDDEN int tg__file_end(tg__file *w, bool ok);
/* For the tests: true makes every temporary a named one from the start,
 * as on a file system without O_TMPFILE. Set it before any save. */
TG_HIDDEN extern bool tg__file_named_only;

/* Returns next after releasing prev: one step of a chain of ops on the same
 * value, e.g. x = tg__then(x, tg_scale(x, s)). next is computed from prev
 * before prev is released, so prev may be next's input. (For every floor:
 * the modules chain public ops this way, and matmul's backward its views.) */
static inline tg_tensor *tg__then(tg_tensor *prev, tg_tensor *next)
{
    tg_release(prev);
    return next;
}

/* ---- A growable string (core/dtoa.c) -----------------------------------
 * For the printouts (core/print.c) and the report pages (plot/). A zeroed
 * sbuf is empty; p is NUL-terminated once anything was written. When memory
 * runs out, oom is set and further text is dropped (what was there stays
 * until freed). */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;
} sbuf;

TG_HIDDEN void tg__sb_putn(sbuf *b, const char *s, size_t n);
TG_HIDDEN void tg__sb_puts(sbuf *b, const char *s);
TG_HIDDEN void tg__sb_putc(sbuf *b, char c);
TG_HIDDEN void tg__sb_repeat(sbuf *b, char c, int n);
TG_HIDDEN void tg__sb_printf(sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends src and frees it (an oom in src carries over). */
TG_HIDDEN void tg__sb_take(sbuf *b, sbuf *src);
/* The text, now the caller's to free ("" when nothing was written), and b
 * emptied; NULL (the text freed) after an oom. */
TG_HIDDEN char *tg__sb_detach(sbuf *b);

#endif /* TAPEGRAD_SHARED_H */
