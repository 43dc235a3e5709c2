/* exit_threads: the process exits while another thread is still releasing
 * tensors, with the leak audit on (TG_DEBUG_LEAKS=1), whose quarantine ring
 * the exit handler flushes and closes. A release racing with that handler
 * must read nothing the handler writes without the lock (the ring's flag
 * once did), nor must the audit's report at exit read its count so: the
 * ThreadSanitizer build (.ci/run) fails on such a race, and every build
 * fails on a crash in a release after the ring is closed.
 *
 * The race needs the two threads to meet within a short window, so the
 * run is repeated in ROUNDS child processes (each forked while single
 * threaded), and any child that does not exit with 0 fails the test.
 * Usage: exit_threads [rounds]; prints one line. */
#include <tapegrad.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *churn(void *arg)
{
    (void)arg;
    for (;;) /* until the process exits under it */
        tg_release(tg_zeros(TG_FLOAT32, TG_SHAPE(2)));
    return NULL;
}

/* One child: the audit on, the ring opened by a first release, a thread
 * releasing, and exit after a few milliseconds. */
static void child(void)
{
    setenv("TG_DEBUG_LEAKS", "1", 1);
    tg_release(tg_zeros(TG_FLOAT32, TG_SHAPE(2)));
    pthread_t t;
    if (pthread_create(&t, NULL, churn, NULL) != 0)
        _exit(3);
    struct timespec ts = {0, 5000000};
    nanosleep(&ts, NULL);
    exit(0); /* the atexit handlers run while churn releases */
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    int failed = 0;
    for (int r = 0; r < rounds; r++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            perror("exit_threads: fork");
            return 1;
        }
        if (pid == 0)
            child();
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            fprintf(stderr, "exit_threads: round %d: the child %s %d\n", r,
                    WIFSIGNALED(status) ? "died of signal" : "exited with",
                    WIFSIGNALED(status) ? WTERMSIG(status)
                                        : WEXITSTATUS(status));
            failed++;
        }
    }
    printf("exit_threads: %d rounds, %s\n", rounds, failed ? "FAILED" : "ok");
    return failed ? 1 : 0;
}
