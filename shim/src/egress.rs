//! Transparent egress in `--network restricted`: programs that ignore the proxy variables are
//! filtered instead of merely cut off. Inside the sandbox's own network namespace (which the
//! shim administers as root of its user namespace, so no host privilege is involved):
//!
//! * an nftables `nat` chain on the `output` hook redirects every IPv4 TCP connection to a
//!   non-loopback address to the proxy's transparent listener, and every UDP datagram to port 53
//!   to the DNS stub — the packets never leave the namespace; the supervisor reads the address
//!   the program asked for with `SO_ORIGINAL_DST` and applies the same policy;
//! * a default route via `lo` (source 127.0.0.1), installed only after the rules are in place,
//!   so that those connections have somewhere to go. Without the route there is no egress at all.
//!
//! UDP other than DNS is routed into `lo` and dropped there (the namespace does not forward).
//! IPv6 gets no route: IPv6 connections to the outside fail with ENETUNREACH.

use std::io;

use crate::netlink::{
    Message, Socket, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST,
};

const NETLINK_NETFILTER: libc::c_int = 12;
const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFT_MSG_NEWTABLE: u16 = 0;
const NFT_MSG_NEWCHAIN: u16 = 3;
const NFT_MSG_NEWRULE: u16 = 6;
const NFPROTO_IPV4: u8 = 2;

const NFTA_TABLE_NAME: u16 = 1;
const NFTA_CHAIN_TABLE: u16 = 1;
const NFTA_CHAIN_NAME: u16 = 3;
const NFTA_CHAIN_HOOK: u16 = 4;
const NFTA_CHAIN_TYPE: u16 = 7;
const NFTA_HOOK_HOOKNUM: u16 = 1;
const NFTA_HOOK_PRIORITY: u16 = 2;
const NFTA_RULE_TABLE: u16 = 1;
const NFTA_RULE_CHAIN: u16 = 2;
const NFTA_RULE_EXPRESSIONS: u16 = 4;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFT_REG_1: u32 = 1;
const NF_INET_LOCAL_OUT: u32 = 3;
/// `NF_IP_PRI_NAT_DST`: where destination NAT happens on the output hook.
const NAT_DST_PRIORITY: i32 = -100;

const TABLE: &str = "sandbox_launch";
const CHAIN: &str = "egress";

/// Redirect outbound TCP to 127.0.0.1:`tcp_port` and DNS to 127.0.0.1:`dns_port`, then route
/// everything non-local into `lo`. On error nothing has been routed: the namespace still has no
/// egress at all.
pub fn install(tcp_port: u16, dns_port: u16) -> io::Result<()> {
    nft_redirects(tcp_port, dns_port).map_err(|e| context(e, "nftables redirect (output hook)"))?;
    default_route_via_lo().map_err(|e| context(e, "default route via lo"))
}

fn context(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// One expression of a rule.
enum Expr {
    /// `meta load <key> => reg 1`
    Meta(u32),
    /// `payload load <len>b @ <base> + <offset> => reg 1`
    Payload { base: u32, offset: u32, len: u32 },
    /// `cmp <op> reg 1 <data>`
    Cmp { neq: bool, data: Vec<u8> },
    /// `immediate reg 1 <data>`
    Immediate(Vec<u8>),
    /// `redir proto_min reg 1`
    Redir,
}

const NFT_META_L4PROTO: u32 = 16;
const NFT_PAYLOAD_NETWORK_HEADER: u32 = 1;
const NFT_PAYLOAD_TRANSPORT_HEADER: u32 = 2;
const NF_NAT_RANGE_PROTO_SPECIFIED: u32 = 0x2;

impl Expr {
    fn write(&self, m: &mut Message) {
        m.begin(NFTA_LIST_ELEM);
        match self {
            Expr::Meta(key) => {
                m.attr_str(NFTA_EXPR_NAME, "meta").begin(NFTA_EXPR_DATA);
                m.attr_be32(1 /* DREG */, NFT_REG_1)
                    .attr_be32(2 /* KEY */, *key);
            }
            Expr::Payload { base, offset, len } => {
                m.attr_str(NFTA_EXPR_NAME, "payload").begin(NFTA_EXPR_DATA);
                m.attr_be32(1 /* DREG */, NFT_REG_1)
                    .attr_be32(2 /* BASE */, *base)
                    .attr_be32(3 /* OFFSET */, *offset)
                    .attr_be32(4 /* LEN */, *len);
            }
            Expr::Cmp { neq, data } => {
                m.attr_str(NFTA_EXPR_NAME, "cmp").begin(NFTA_EXPR_DATA);
                m.attr_be32(1 /* SREG */, NFT_REG_1)
                    .attr_be32(2 /* OP */, u32::from(*neq))
                    .begin(3 /* DATA */)
                    .attr(NFTA_DATA_VALUE, data)
                    .end();
            }
            Expr::Immediate(data) => {
                m.attr_str(NFTA_EXPR_NAME, "immediate")
                    .begin(NFTA_EXPR_DATA);
                m.attr_be32(1 /* DREG */, NFT_REG_1)
                    .begin(2 /* DATA */)
                    .attr(NFTA_DATA_VALUE, data)
                    .end();
            }
            Expr::Redir => {
                m.attr_str(NFTA_EXPR_NAME, "redir").begin(NFTA_EXPR_DATA);
                m.attr_be32(1 /* REG_PROTO_MIN */, NFT_REG_1)
                    .attr_be32(3 /* FLAGS */, NF_NAT_RANGE_PROTO_SPECIFIED);
            }
        }
        m.end().end();
    }
}

/// `ip daddr != 127.0.0.0/8`: the first byte of the destination address.
fn not_loopback() -> [Expr; 2] {
    [
        Expr::Payload {
            base: NFT_PAYLOAD_NETWORK_HEADER,
            offset: 16,
            len: 1,
        },
        Expr::Cmp {
            neq: true,
            data: vec![127],
        },
    ]
}

fn redirect_to(port: u16) -> [Expr; 2] {
    [Expr::Immediate(port.to_be_bytes().to_vec()), Expr::Redir]
}

/// The rules, as `nft` would print them:
/// `meta l4proto tcp ip daddr != 127.0.0.0/8 redirect to :TCP`
/// `meta l4proto udp udp dport 53 ip daddr != 127.0.0.0/8 redirect to :DNS`
fn rules(tcp_port: u16, dns_port: u16) -> Vec<Vec<Expr>> {
    let l4 = |proto: i32| {
        [
            Expr::Meta(NFT_META_L4PROTO),
            Expr::Cmp {
                neq: false,
                data: vec![proto as u8],
            },
        ]
    };
    let mut tcp = Vec::new();
    tcp.extend(l4(libc::IPPROTO_TCP));
    tcp.extend(not_loopback());
    tcp.extend(redirect_to(tcp_port));
    let mut dns = Vec::new();
    dns.extend(l4(libc::IPPROTO_UDP));
    dns.push(Expr::Payload {
        base: NFT_PAYLOAD_TRANSPORT_HEADER,
        offset: 2,
        len: 2,
    });
    dns.push(Expr::Cmp {
        neq: false,
        data: 53u16.to_be_bytes().to_vec(),
    });
    dns.extend(not_loopback());
    dns.extend(redirect_to(dns_port));
    vec![tcp, dns]
}

fn nfgen(family: u8, res_id: u16) -> [u8; 4] {
    let r = res_id.to_be_bytes();
    [family, 0, r[0], r[1]]
}

fn nft_redirects(tcp_port: u16, dns_port: u16) -> io::Result<()> {
    let kind = |msg: u16| (NFNL_SUBSYS_NFTABLES << 8) | msg;
    let fixed = nfgen(NFPROTO_IPV4, 0);
    let create = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE;

    let mut messages = vec![Message::new(
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        &nfgen(libc::AF_UNSPEC as u8, NFNL_SUBSYS_NFTABLES),
    )];
    let mut table = Message::new(kind(NFT_MSG_NEWTABLE), create, &fixed);
    table.attr_str(NFTA_TABLE_NAME, TABLE);
    messages.push(table);

    let mut chain = Message::new(kind(NFT_MSG_NEWCHAIN), create, &fixed);
    chain
        .attr_str(NFTA_CHAIN_TABLE, TABLE)
        .attr_str(NFTA_CHAIN_NAME, CHAIN)
        .begin(NFTA_CHAIN_HOOK)
        .attr_be32(NFTA_HOOK_HOOKNUM, NF_INET_LOCAL_OUT)
        .attr_be32(NFTA_HOOK_PRIORITY, NAT_DST_PRIORITY as u32)
        .end()
        .attr_str(NFTA_CHAIN_TYPE, "nat");
    messages.push(chain);

    for exprs in rules(tcp_port, dns_port) {
        let mut rule = Message::new(kind(NFT_MSG_NEWRULE), create | NLM_F_APPEND, &fixed);
        rule.attr_str(NFTA_RULE_TABLE, TABLE)
            .attr_str(NFTA_RULE_CHAIN, CHAIN)
            .begin(NFTA_RULE_EXPRESSIONS);
        for e in &exprs {
            e.write(&mut rule);
        }
        rule.end();
        messages.push(rule);
    }
    messages.push(Message::new(
        NFNL_MSG_BATCH_END,
        NLM_F_REQUEST,
        &nfgen(libc::AF_UNSPEC as u8, NFNL_SUBSYS_NFTABLES),
    ));
    let mut acked = vec![true; messages.len()];
    acked[0] = false;
    *acked.last_mut().unwrap() = false;
    Socket::open(NETLINK_NETFILTER)?.transact(&mut messages, &acked)
}

const RTM_NEWROUTE: u16 = 24;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_LINK: u8 = 253;
const RTN_UNICAST: u8 = 1;
const RTA_OIF: u16 = 4;
const RTA_PREFSRC: u16 = 7;

/// `ip route add default dev lo src 127.0.0.1`.
fn default_route_via_lo() -> io::Result<()> {
    // SAFETY: if_nametoindex reads a NUL-terminated string.
    let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
    if lo == 0 {
        return Err(io::Error::last_os_error());
    }
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags (u32).
    let mut rtmsg = [0u8; 12];
    rtmsg[0] = libc::AF_INET as u8;
    rtmsg[4] = RT_TABLE_MAIN;
    rtmsg[5] = RTPROT_BOOT;
    rtmsg[6] = RT_SCOPE_LINK;
    rtmsg[7] = RTN_UNICAST;
    let mut route = Message::new(
        RTM_NEWROUTE,
        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        &rtmsg,
    );
    route
        .attr(RTA_OIF, &lo.to_ne_bytes())
        .attr(RTA_PREFSRC, &[127, 0, 0, 1]);
    Socket::open(libc::NETLINK_ROUTE)?.transact(&mut [route], &[true])
}

/// The original destination of a connection the redirect delivered (`SO_ORIGINAL_DST`), for
/// callers holding the accepted socket.
pub fn original_destination(fd: std::os::fd::RawFd) -> io::Result<std::net::SocketAddrV4> {
    const SO_ORIGINAL_DST: libc::c_int = 80;
    // SAFETY: sockaddr_in is plain data.
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `addr`.
    let ret = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_IP,
            SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(std::net::SocketAddrV4::new(
        u32::from_be(addr.sin_addr.s_addr).into(),
        u16::from_be(addr.sin_port),
    ))
}
