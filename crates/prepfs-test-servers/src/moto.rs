//! moto's S3 server (`python3 -m moto.server`, installed by `make test` as `moto[server]`) on a
//! loopback port: the object store the source's tests list and read. moto keeps its objects in
//! memory and takes unsigned requests until a signed one has been made, so the tests make
//! buckets and objects with plain HTTP ([`Moto::request`]).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{die_with_parent, free_port};

/// A running moto S3 server; dropping it kills and reaps it.
pub struct Moto {
    child: Child,
    pub port: u16,
}

impl Moto {
    /// Starts a server on a free loopback port and waits (30 s at most) until it accepts.
    pub fn start() -> Moto {
        let port = free_port();
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        die_with_parent(&mut cmd);
        let child = cmd.spawn().expect("python3 -m moto.server (make test installs moto[server])");
        let moto = Moto { child, port };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "moto did not come up on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Makes `bucket`.
    pub fn make_bucket(&self, bucket: &str) {
        self.request("PUT", &format!("/{bucket}"), b"");
    }

    /// One unsigned request, its answer checked to be `200` (a key an S3 client would not make,
    /// `a/`, can be put this way).
    pub fn request(&self, method: &str, path: &str, body: &[u8]) {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect to moto");
        write!(stream, "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", self.port, body.len())
            .expect("send");
        stream.write_all(body).expect("body");
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).expect("answer");
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{method} {path}: {}", String::from_utf8_lossy(&answer));
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
