/* Syscall cost microbenchmark, run inside each sandbox by scripts/bench.sh.
 * Usage: sysloop getppid|openclose|forkexec|create|openwrite N  -> nanoseconds per operation.
 * `create` makes and removes a file in /dev/shm (a tmpfs in every sandbox measured);
 * `openwrite` opens an existing file there for writing and closes it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s getppid|openclose|forkexec|create|openwrite N\n", argv[0]);
        return 2;
    }
    long n = atol(argv[2]);
    double t0 = now();
    if (!strcmp(argv[1], "getppid")) {
        for (long i = 0; i < n; i++) syscall(SYS_getppid);
    } else if (!strcmp(argv[1], "openclose")) {
        for (long i = 0; i < n; i++) {
            int fd = open("/etc/hostname", O_RDONLY | O_CLOEXEC);
            if (fd < 0) { perror("open"); return 1; }
            close(fd);
        }
    } else if (!strcmp(argv[1], "forkexec")) {
        for (long i = 0; i < n; i++) {
            pid_t p = fork();
            if (p == 0) { execl("/bin/true", "true", (char *)0); _exit(127); }
            int st;
            waitpid(p, &st, 0);
            if (!WIFEXITED(st) || WEXITSTATUS(st)) { fprintf(stderr, "child failed\n"); return 1; }
        }
    } else if (!strcmp(argv[1], "create")) {
        char path[64];
        snprintf(path, sizeof path, "/dev/shm/sysloop-%d", (int)getpid());
        for (long i = 0; i < n; i++) {
            int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
            if (fd < 0) { perror("create"); return 1; }
            close(fd);
            unlink(path);
        }
    } else if (!strcmp(argv[1], "openwrite")) {
        char path[64];
        snprintf(path, sizeof path, "/dev/shm/sysloop-w-%d", (int)getpid());
        int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
        if (fd < 0) { perror("create"); return 1; }
        close(fd);
        t0 = now();
        for (long i = 0; i < n; i++) {
            fd = open(path, O_WRONLY | O_CLOEXEC);
            if (fd < 0) { perror("openwrite"); return 1; }
            close(fd);
        }
        unlink(path);
    } else {
        fprintf(stderr, "unknown op %s\n", argv[1]);
        return 2;
    }
    printf("%.1f\n", (now() - t0) / n);
    return 0;
}
