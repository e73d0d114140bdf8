/*
 * The pause container: the process that holds a pod's namespaces while its containers come and go.
 * It does nothing but wait: SIGTERM or SIGINT ends it (status 0), and as PID 1 of a shared PID
 * namespace it reaps every orphan that is re-parented to it, so none lingers as a zombie.
 * Built static (`gcc -static -Os`) so that the image holds this one file and nothing else.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    static const char msg[] = "pause: shutting down\n";
    (void)sig;
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(0);
}

static void reap(int sig) {
    int saved = errno;
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    errno = saved;
}

int main(int argc, char **argv) {
    struct sigaction sa;
    if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
        puts("pause (isthmus) 3.10");
        return 0;
    }
    if (getpid() != 1) {
        /* The same warning as Kubernetes' pause: it still works, but orphans are not its own. */
        fputs("Warning: pause should be the first process\n", stderr);
    }
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = stop;
    if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    sa.sa_handler = reap;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    if (sigaction(SIGCHLD, &sa, NULL) < 0) {
        perror("pause: sigaction");
        return 2;
    }
    for (;;) {
        pause();
    }
    fputs("pause: error: infinite loop terminated\n", stderr);
    return 42;
}
