/* Syscall cost microbenchmark, run inside each sandbox by scripts/bench.sh.
 * Usage: sysloop getppid|openclose|forkexec|create|openwrite|connect|sendto N  -> nanoseconds per operation.
 * `create` makes and removes a file in /dev/shm (a tmpfs in every sandbox measured);
 * `openwrite` opens an existing file there for writing and closes it;
 * `connect` opens a TCP connection to a listener of its own on 127.0.0.1:47999 (socket,
 * connect, accept, close both; the client resets, so no TIME_WAIT piles up);
 * `sendto` sends a UDP datagram to its own socket on 127.0.0.1 (a send naming an address) and
 * receives it. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
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
        fprintf(stderr, "usage: %s getppid|openclose|forkexec|create|openwrite|connect|sendto N\n", argv[0]);
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
    } else if (!strcmp(argv[1], "connect")) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(47999)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 64)) { perror("listen"); return 1; }
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        t0 = now();
        for (long i = 0; i < n; i++) {
            int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return 1; }
            int s = accept(l, 0, 0);
            if (s < 0) { perror("accept"); return 1; }
            setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
            close(c);
            close(s);
        }
        close(l);
    } else if (!strcmp(argv[1], "sendto")) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (u < 0 || bind(u, (struct sockaddr *)&a, sizeof a) || getsockname(u, (struct sockaddr *)&a, &len)) { perror("udp"); return 1; }
        char b[64] = "x";
        t0 = now();
        for (long i = 0; i < n; i++) {
            if (sendto(u, b, 1, 0, (struct sockaddr *)&a, sizeof a) != 1) { perror("sendto"); return 1; }
            if (recv(u, b, sizeof b, 0) != 1) { perror("recv"); return 1; }
        }
        close(u);
    } else {
        fprintf(stderr, "unknown op %s\n", argv[1]);
        return 2;
    }
    printf("%.1f\n", (now() - t0) / n);
    return 0;
}
