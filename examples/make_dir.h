/* The examples' output directories: mkdir unless there, one level, as the
 * pictures/ of their defaults. Header-only, shared by the examples. */
#ifndef TAPEGRAD_EXAMPLES_MAKE_DIR_H
#define TAPEGRAD_EXAMPLES_MAKE_DIR_H

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* mkdir dir unless it is a directory already. 0, or -1 with errno (ENOTDIR
 * when something else has the name). */
static inline int example_make_dir(const char *dir)
{
    struct stat st;
    if (mkdir(dir, 0777) == 0)
        return 0;
    if (errno == EEXIST && stat(dir, &st) == 0)
        return S_ISDIR(st.st_mode) ? 0 : (errno = ENOTDIR, -1);
    return -1;
}

/* example_make_dir of the directory part of path (before its last '/'),
 * if it has one; dir receives that part (cap bytes), for messages. */
static inline int example_make_parent(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    dir[0] = '\0';
    if (!slash || slash == path)
        return 0;
    snprintf(dir, cap, "%.*s", (int)(slash - path), path);
    return example_make_dir(dir);
}

#endif /* TAPEGRAD_EXAMPLES_MAKE_DIR_H */
