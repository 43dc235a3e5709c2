/* Finding and running the floor's external programs (see plot/tools.h). */
#include "plot/tools.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

bool tg__plot_env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

bool tg__plot_find(const char *name, char *path, size_t cap)
{
    const char *dirs = getenv("PATH");
    if (!dirs)
        dirs = "/usr/local/bin:/usr/bin:/bin";
    for (const char *dir = dirs;; dir++) {
        size_t n = strcspn(dir, ":");
        int len =
            snprintf(path, cap, "%.*s/%s", n ? (int)n : 1, n ? dir : ".", name);
        struct stat st;
        if (len > 0 && (size_t)len < cap && stat(path, &st) == 0 &&
            S_ISREG(st.st_mode) && access(path, X_OK) == 0)
            return true;
        dir += n;
        if (!*dir)
            return false;
    }
}

/* Reads fd to its end, keeping its last non-empty line in line: only the
 * end matters, so a long output keeps its last 2 KiB. */
static void read_last_line(int fd, char *line, size_t cap)
{
    char tail[2048];
    size_t len = 0;
    for (;;) {
        if (len == sizeof tail) { /* drop the older half */
            memmove(tail, tail + len / 2, len - len / 2);
            len -= len / 2;
        }
        ssize_t got = read(fd, tail + len, sizeof tail - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    while (len > 0 && isspace((unsigned char)tail[len - 1]))
        len--;
    size_t start = len;
    while (start > 0 && tail[start - 1] != '\n')
        start--;
    snprintf(line, cap, "%.*s", (int)(len - start), tail + start);
}

int tg__plot_run(const char *path, char *const argv[], char *last, size_t cap)
{
    last[0] = '\0';
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC); /* the child's copies are dup2'd */
    posix_spawn_file_actions_t actions;
    pid_t pid = -1;
    int err = posix_spawn_file_actions_init(&actions);
    if (err == 0) {
        err = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null",
                                               O_RDONLY, 0);
        if (err == 0)
            err = posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
        if (err == 0)
            err = posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
        if (err == 0)
            err = posix_spawn(&pid, path, &actions, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&actions);
    }
    close(fds[1]); /* the child holds the write end: EOF when it exits */
    if (err != 0) {
        close(fds[0]);
        errno = err;
        return -1;
    }
    read_last_line(fds[0], last, cap);
    close(fds[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return status;
}

tg__c_numbers tg__c_numbers_begin(void)
{
    tg__c_numbers l = {newlocale(LC_NUMERIC_MASK, "C", (locale_t)0),
                       (locale_t)0};
    if (l.c)
        l.prev = uselocale(l.c);
    return l;
}

void tg__c_numbers_end(tg__c_numbers l)
{
    if (l.c) {
        uselocale(l.prev);
        freelocale(l.c);
    }
}
