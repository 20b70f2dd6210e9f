/* The ceiling of any user-space TCP relay, for the proxy benchmarks: the least a relay can do,
 * with no checks at all -- accept on 127.0.0.1:LISTEN, connect to 127.0.0.1:UPSTREAM and move
 * the bytes both ways with splice(2) through a pipe, as sandbox-launch's tunnels do.
 * Usage: splice_relay LISTEN UPSTREAM   -- one connection at a time, until killed. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static int tcp(int port, int listening) {
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (listening) {
        setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16)) { perror("bind/listen"); exit(1); }
    } else {
        if (connect(s, (struct sockaddr *)&a, sizeof a)) { perror("connect"); return -1; }
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return s;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s LISTEN UPSTREAM\n", argv[0]); return 2; }
    int l = tcp(atoi(argv[1]), 1);
    for (;;) {
        int c = accept(l, NULL, NULL);
        if (c < 0) continue;
        int u = tcp(atoi(argv[2]), 0);
        if (u < 0) { close(c); continue; }
        int from[2] = { c, u }, pr[2], pw[2], open_ends = 2;
        for (int i = 0; i < 2; i++) {
            int p[2];
            if (pipe(p)) { perror("pipe"); return 1; }
            fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
            pr[i] = p[0];
            pw[i] = p[1];
        }
        while (open_ends > 0) {
            struct pollfd pf[2] = { { from[0], POLLIN, 0 }, { from[1], POLLIN, 0 } };
            if (poll(pf, 2, -1) < 0) continue;
            for (int i = 0; i < 2; i++) {
                if (!pf[i].revents) continue;
                ssize_t n = splice(from[i], NULL, pw[i], NULL, 1 << 20, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n == 0 || (n < 0 && pf[i].revents & (POLLHUP | POLLERR))) {
                    shutdown(i ? c : u, SHUT_WR);
                    from[i] = -1; /* poll ignores negative descriptors */
                    open_ends--;
                }
                while (n > 0) {
                    ssize_t m = splice(pr[i], NULL, i ? c : u, NULL, n, SPLICE_F_MOVE);
                    if (m <= 0) break;
                    n -= m;
                }
            }
        }
        close(c); close(u);
        for (int i = 0; i < 2; i++) { close(pr[i]); close(pw[i]); }
    }
}
