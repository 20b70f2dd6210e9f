//! Init's network thread: the sandbox's network namespace (made here rather than in the clone:
//! making one costs ~0.3 ms) and what it holds — `lo` up, and with restricted egress the
//! proxy's listeners, the NAT chain and a sock_diag socket, handed to the supervisor — made on a
//! thread of its own while init's main thread builds the mounts. Neither reads what the other
//! makes (this side uses sockets and netlink, no path).
//!
//! The main thread moves into the namespace as soon as it exists ([`Network::enter`], before it
//! forks anything) and joins the thread once what it holds is ready ([`Network::finish`]), which
//! comes before anything is set per thread (credentials, Landlock, seccomp): no part of init
//! runs with less confinement than the rest once the first of those is set. The thread starts
//! after init has emptied the bounding set (which limits only what an exec could gain; the
//! thread never execs and is gone before the program starts). Failures are reported in the
//! pipeline's order: the network's first.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc;

use crate::channel::{self, AtStep, FromShim, Step, StepError};
use crate::spec::{NetworkSpec, Transparent};
use crate::{egress, network};

type Outcome = (libc::pid_t, Result<bool, StepError>);

/// The network being set up.
pub struct Network {
    state: State,
}

enum State {
    /// Nothing to wait for: the host's network (`full`), or set up already by the calling
    /// thread (no thread could be had): whether transparent egress is in place.
    Done(bool),
    Thread {
        handle: crate::cpus::Thread<Outcome>,
        /// The new namespace (or why there is none), as soon as it exists.
        namespace: mpsc::Receiver<Result<OwnedFd, StepError>>,
        entered: bool,
    },
}

/// Start setting the network up, for `network` (nothing for `full`).
pub fn start(sync: RawFd, network: &NetworkSpec) -> Result<Network, StepError> {
    if *network == NetworkSpec::Full {
        return Ok(Network {
            state: State::Done(false),
        });
    }
    let (tell, namespace) = mpsc::sync_channel(1);
    let spec = network.clone();
    // Started on the other CPU: init goes on with the mounts on its own (see `crate::cpus`).
    let spawned = crate::cpus::spawn(NETWORK_STACK, crate::cpus::Start::Elsewhere, move || {
        yield_to_the_plan();
        let made = network::enter_new();
        let failed = made.as_ref().err().map(|e| StepError(e.0.clone()));
        let _ = tell.send(made);
        let set_up = match failed {
            Some(e) => Err(e),
            None => setup(sync, &spec),
        };
        // SAFETY: gettid has no preconditions.
        (unsafe { libc::gettid() }, set_up)
    });
    let Ok(handle) = spawned else {
        // No thread to be had: one after the other, in this thread's own namespace.
        network::enter_new()?;
        return Ok(Network {
            state: State::Done(setup(sync, network)?),
        });
    };
    Ok(Network {
        state: State::Thread {
            handle,
            namespace,
            entered: false,
        },
    })
}

impl Network {
    /// Move the calling thread (init's main thread, which forks the program) into the new
    /// namespace, once it exists; what it holds may still be on its way. Verification checks,
    /// from this thread, that it holds only `lo`.
    pub fn enter(&mut self) -> Result<(), StepError> {
        let State::Thread {
            namespace, entered, ..
        } = &mut self.state
        else {
            return Ok(());
        };
        if *entered {
            return Ok(());
        }
        let ns = match namespace.recv() {
            Ok(made) => made,
            // The thread ended without a word: it panicked (said by `finish`).
            Err(_) => Err(StepError::new(
                Step::Network,
                "the network setup's thread ended before it made the namespace",
                None,
            )),
        };
        let entered_now = ns.and_then(|ns| network::join(&ns));
        *entered = entered_now.is_ok();
        entered_now
    }

    /// Wait until the network is set up (the thread has ended): whether transparent egress is
    /// in place. Init is in the new namespace afterwards.
    pub fn finish(mut self) -> Result<bool, StepError> {
        let entered = self.enter();
        let handle = match self.state {
            State::Done(transparent) => return entered.map(|()| transparent),
            State::Thread { handle, .. } => handle,
        };
        let (tid, set_up) = handle.join().map_err(|_| {
            StepError::new(Step::Network, "the network setup's thread panicked", None)
        })?;
        give_back_pid(tid);
        // The thread's own failure first: a namespace that could not be made is one.
        let transparent = set_up?;
        entered.map(|()| transparent)
    }

    /// `failure` of the main thread's work, or the network's own failure before it, if it has
    /// one (the pipeline's order); the thread has ended on return.
    pub fn first_failure(self, failure: StepError) -> StepError {
        match self.finish() {
            Err(network) => network,
            Ok(_) => failure,
        }
    }
}

/// The network's thread runs at a lower priority: what it makes is needed late (when init
/// enters the namespace after its mounts, and joins the thread before its privileges are
/// dropped), while the supervisor's persistence plan, with which it shares a CPU (see
/// [`crate::cpus`]), is needed first (init waits for it halfway through the mounts). Only a
/// matter of speed: the thread ends before the program starts, and a refusal changes nothing.
fn yield_to_the_plan() {
    // SAFETY: setpriority on the calling thread (who = 0), with a constant value.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 10) };
}

/// The network's thread needs little stack (sockets and netlink messages).
const NETWORK_STACK: usize = 256 * 1024;

/// The network's thread took the namespace's next PID, 2, which is the program's (README): once
/// the thread is gone, the next PID is 2 again. The join returns when the thread has released
/// its memory, a little before the kernel frees its id: that is waited for first. Nothing
/// depends on the number but what the program sees (`$$`); it is never a reason to stop.
fn give_back_pid(tid: libc::pid_t) {
    for _ in 0..10_000 {
        // SAFETY: signal 0 to a thread of this process only asks whether it still exists.
        let ret = unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, 0) };
        if ret != 0 && nix::errno::Errno::last() == nix::errno::Errno::ESRCH {
            break;
        }
        std::thread::yield_now();
    }
    // Writable by the namespace's owner: init, still privileged here.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .open("/proc/sys/kernel/ns_last_pid")
    {
        let _ = std::io::Write::write_all(&mut f, b"1");
    }
}

/// What the namespace holds. Returns whether transparent egress is in place.
fn setup(sync: RawFd, network: &NetworkSpec) -> Result<bool, StepError> {
    match network {
        NetworkSpec::Full => Ok(false),
        NetworkSpec::None => network::loopback_up().map(|()| false),
        NetworkSpec::Restricted {
            listen_ports,
            transparent,
        } => {
            network::loopback_up()?;
            let listeners = network::listeners(listen_ports)?;
            let mut fds: Vec<RawFd> = listeners.iter().map(|l| l.as_raw_fd()).collect();
            let mut extra = None;
            if let Some(t) = transparent {
                match transparent_egress(t) {
                    Ok(sockets) => extra = Some(sockets),
                    Err(e) => channel::send(
                        sync,
                        &FromShim::Warning {
                            text: format!(
                                "transparent egress is not available ({e}); only programs that use the proxy variables can reach allowed hosts (`sandbox-launch doctor` says what this host lacks)"
                            ),
                        },
                        &[],
                    )
                    .at(Step::Internal)?,
                }
            }
            if let Some((tcp, dns)) = &extra {
                fds.extend([tcp.as_raw_fd(), dns.as_raw_fd()]);
            }
            // Last, when the kernel gives one: a sock_diag socket of this namespace, with which
            // the proxy finds the socket behind a connection by its addresses.
            let diag = network::sock_diag().ok();
            fds.extend(diag.as_ref().map(|d| d.as_raw_fd()));
            // Sent by this thread as its last act. Sent instead by init's main thread once it has
            // joined this one (so that the supervisor, woken by it, no longer works on this
            // thread's CPU while init waits for its end), launches were 0.7–5% faster in the
            // benchmark's empty setting and 1.6–5% slower in a developer's (interleaved A/B),
            // where this thread ends before init needs it and the supervisor's work then met
            // init's last steps.
            let msg = FromShim::Listeners {
                transparent: extra.is_some(),
            };
            channel::send(sync, &msg, &fds).at(Step::Network)?;
            Ok(extra.is_some())
        }
    }
}

/// The transparent listener, the DNS stub's socket, and the redirect to them.
fn transparent_egress(
    t: &Transparent,
) -> Result<(std::net::TcpListener, std::net::UdpSocket), StepError> {
    let tcp = network::listeners(&[t.tcp_port])?.remove(0);
    let dns = network::dns_socket(t.dns_port)?;
    egress::install(t.tcp_port, t.dns_port).at(Step::Network)?;
    Ok((tcp, dns))
}
