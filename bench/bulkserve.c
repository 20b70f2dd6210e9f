/* A minimal HTTP/1.1 server for the proxy benchmarks (127.0.0.1 only).
 * Usage: bulkserve PORT BYTES   -- every request gets BYTES of zeros; keep-alive honoured.
 * One process per connection (fork), so concurrent tunnels are served too. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static char buf[1 << 20];

static void serve(int c, long long bytes) {
    char req[8192];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(c, req + have, sizeof req - have - 1);
        if (n <= 0) return;
        have += (size_t)n;
        req[have] = 0;
        char *end;
        while ((end = strstr(req, "\r\n\r\n"))) {
            int close_after = strcasestr(req, "connection: close") != NULL;
            char hdr[256];
            int h = snprintf(hdr, sizeof hdr, "HTTP/1.1 200 OK\r\nContent-Length: %lld\r\n%s\r\n", bytes,
                             close_after ? "Connection: close\r\n" : "");
            if (write(c, hdr, h) != h) return;
            long long left = bytes;
            while (left > 0) {
                ssize_t w = write(c, buf, left > (long long)sizeof buf ? sizeof buf : (size_t)left);
                if (w <= 0) return;
                left -= w;
            }
            if (close_after) return;
            size_t used = (size_t)(end + 4 - req);
            memmove(req, end + 4, have - used + 1);
            have -= used;
        }
        if (have >= sizeof req - 1) return;
    }
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s PORT BYTES\n", argv[0]); return 2; }
    signal(SIGCHLD, SIG_IGN);
    int s = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 4096)) { perror("bind/listen"); return 1; }
    long long bytes = atoll(argv[2]);
    for (;;) {
        int c = accept(s, NULL, NULL);
        if (c < 0) continue;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (fork() == 0) { close(s); serve(c, bytes); _exit(0); }
        close(c);
    }
}
