//! Helpers of the login-shell tests (root only): a user whose login shell is the launcher, a
//! `/etc/sandbox-launch/login.yaml` seen only by the processes a test starts, and an sshd on
//! 127.0.0.1 with keys of its own. Each undoes itself when dropped: the user and its home are
//! removed, sshd is stopped, nothing is written to the host's `/etc` or `/run`.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::TempDir;

/// A user made for one test (`useradd -m`), removed with its home when dropped.
pub struct TestUser {
    pub name: String,
    pub home: PathBuf,
    pub uid: u32,
}

impl TestUser {
    /// A new user whose login shell is `shell`.
    pub fn new(shell: &Path) -> TestUser {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "sl{}x{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        );
        let home = PathBuf::from("/home").join(&name);
        // `*`: no password can log in, but the account is not locked (sshd refuses `!`).
        let status = Command::new("useradd")
            .args(["-m", "-p", "*", "-s"])
            .arg(shell)
            .arg("-d")
            .arg(&home)
            .arg(&name)
            .status()
            .expect("useradd");
        assert!(status.success(), "useradd {name}");
        let out = Command::new("id").args(["-u", &name]).output().unwrap();
        let uid = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        TestUser { name, home, uid }
    }

    /// Give `path` (in the home) to the user.
    pub fn own(&self, path: &Path) {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{0}:{0}", self.name))
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        // Whatever of the user still runs (a session that outlived its test) goes first.
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.uid.to_string()])
            .status();
        std::thread::sleep(Duration::from_millis(50));
        let _ = Command::new("userdel")
            .args(["-r", "-f", &self.name])
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// An `/etc` seen only by the processes started through [`PrivateEtc::command`]: the host's,
/// under an overlay whose upper layer holds `sandbox-launch/login.yaml` (and any other file a
/// test puts there), in a mount namespace of their own. The host's `/etc` is never written.
pub struct PrivateEtc {
    dir: TempDir,
}

impl PrivateEtc {
    pub fn new() -> PrivateEtc {
        let dir = TempDir::new("etc");
        for d in ["upper/sandbox-launch", "work"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        // Root's, like the real /etc: TempDir hands its directory to the sandbox's user.
        let status = Command::new("chown")
            .args(["-R", "0:0"])
            .arg(&dir.path)
            .status()
            .unwrap();
        assert!(status.success());
        PrivateEtc { dir }
    }

    /// Write `/etc/<rel>` (root's, mode `mode`) as the private namespace sees it.
    pub fn write(&self, rel: &str, text: &str, mode: u32) -> PathBuf {
        let p = self.dir.join("upper").join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        Path::new("/etc").join(rel)
    }

    /// `program args…` in a mount namespace where `/etc` has the overlay and `/run` is a fresh
    /// tmpfs with `/run/sshd` (sshd's privilege-separation directory, which this host may lack).
    pub fn command(&self, program: &Path, args: &[&str]) -> Command {
        let script = format!(
            "mount -t overlay overlay -o lowerdir=/etc,upperdir={0}/upper,workdir={0}/work /etc \
             && mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 /run/sshd && exec \"$@\"",
            self.dir.path.display()
        );
        let mut c = Command::new("unshare");
        c.args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
            "sh",
        ]);
        c.arg(program).args(args);
        c
    }
}

impl Default for PrivateEtc {
    fn default() -> Self {
        Self::new()
    }
}

/// A free TCP port on 127.0.0.1 (bound and let go).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An sshd on 127.0.0.1, with a host key and a client key of its own, letting only `user` in
/// with that key. Its configuration is laid out as Debian's: the README's recipe for `user` as
/// a drop-in included first (less the settings named in `without`), then the server's own
/// lines and the external sftp server.
pub struct Sshd {
    pub port: u16,
    pub dir: TempDir,
    child: Child,
}

impl Sshd {
    pub fn start(etc: &PrivateEtc, user: &TestUser, without: &[&str]) -> Sshd {
        let dir = TempDir::new("sshd");
        let status = Command::new("chown")
            .args(["0:0"])
            .arg(&dir.path)
            .status()
            .unwrap();
        assert!(status.success());
        std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(0o700)).unwrap();
        for key in ["host", "client"] {
            keygen(&dir.join(key));
        }
        let ssh_dir = user.home.join(".ssh");
        std::fs::create_dir_all(&ssh_dir).unwrap();
        std::fs::copy(dir.join("client.pub"), ssh_dir.join("authorized_keys")).unwrap();
        user.own(&ssh_dir);
        std::fs::set_permissions(&ssh_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let port = free_port();
        let dropin = dir.join("sandbox-launch.conf");
        std::fs::write(&dropin, recipe_for(&user.name, without)).unwrap();
        let config = format!(
            "Include {}\nPort {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile none\n\
             UsePAM no\nAuthorizedKeysFile .ssh/authorized_keys\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\nAllowUsers {}\n\
             PrintMotd no\nPrintLastLog no\nLogLevel ERROR\n{SFTP}\n",
            dropin.display(),
            dir.join("host").display(),
            user.name
        );
        let cfg = dir.join("sshd_config");
        std::fs::write(&cfg, config).unwrap();
        let child = etc
            .command(
                Path::new("/usr/sbin/sshd"),
                &["-D", "-e", "-f", cfg.to_str().unwrap()],
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sshd");
        let mut sshd = Sshd { port, dir, child };
        sshd.wait_listening();
        sshd
    }

    fn wait_listening(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                panic!("sshd exited ({status}): {err}");
            }
            assert!(Instant::now() < deadline, "sshd did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The options every client command needs: this server, its key, no host-key prompt, no
    /// configuration of the invoker's.
    pub fn client_opts(&self) -> Vec<String> {
        [
            "-F",
            "/dev/null",
            "-i",
            self.dir.join("client").to_str().unwrap(),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// `ssh` (or `scp`, `sftp`: `port_flag` is `-p` or `-P`) with the client options.
    pub fn client(&self, program: &str, port_flag: &str) -> Command {
        let mut c = Command::new(program);
        c.args(self.client_opts())
            .arg(port_flag)
            .arg(self.port.to_string());
        c
    }

    /// The `ssh` command line rsync's `-e` takes.
    pub fn rsync_shell(&self) -> String {
        format!("ssh {} -p {}", self.client_opts().join(" "), self.port)
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// A new ed25519 key pair at `path` and `path.pub`.
pub fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "sandbox-launch-test",
            "-f",
        ])
        .arg(path)
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
}

/// The external sftp server, as Debian's `sshd_config` declares it.
pub const SFTP: &str = "Subsystem sftp /usr/lib/openssh/sftp-server";

/// The README's sshd drop-in, exactly as written there (the fenced block that starts with its
/// file name), so that the tests check what an administrator pastes.
pub fn readme_recipe() -> String {
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md");
    let text = std::fs::read_to_string(&readme).expect("read README.md");
    let start = text
        .find("```\n# /etc/ssh/sshd_config.d/sandbox-launch.conf\n")
        .expect("README.md has the sshd recipe block")
        + "```\n".len();
    let len = text[start..].find("```\n").expect("the recipe block ends");
    text[start..start + len].to_string()
}

/// The README's recipe for `user` (its `Match User agent` line naming them), less the
/// settings named in `without`.
pub fn recipe_for(user: &str, without: &[&str]) -> String {
    let recipe = readme_recipe();
    assert!(recipe.contains("\nMatch User agent "), "{recipe}");
    let recipe = recipe.replace("\nMatch User agent ", &format!("\nMatch User {user} "));
    let kept: Vec<&str> = recipe
        .lines()
        .filter(|l| !without.contains(&l.split_whitespace().next().unwrap_or("")))
        .collect();
    assert_eq!(
        recipe.lines().count() - kept.len(),
        without.len(),
        "{without:?} in {recipe}"
    );
    kept.join("\n") + "\n"
}
