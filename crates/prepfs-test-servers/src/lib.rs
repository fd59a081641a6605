//! Real servers for prepfs's tests (never mocks), each on a free loopback port of its own and
//! killed on every way out (the guard's drop, a panic unwinding through it, or the test process
//! dying: the server gets SIGKILL when the thread that started it ends):
//!
//! - [`redis`]: `redis-server`, and a three-node cluster (the remote tier's tests);
//! - [`moto`]: moto's S3 server, `python3 -m moto.server` (the object-store source's tests).
//!
//! A dev-dependency of the core (unit tests) and of the binary crate (the mounted tests); it
//! uses std and libc only. `make test` installs both servers.

pub mod moto;
pub mod redis;

pub use moto::Moto;
pub use redis::{RedisCluster, RedisServer, SharedRedis};

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// A port nothing listens on now (the kernel's pick, released at once).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("a free loopback port")
}

/// Makes the child `cmd` starts get SIGKILL when the thread that started it ends, so a test
/// process that dies takes its servers with it.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}
