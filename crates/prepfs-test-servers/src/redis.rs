//! A real `redis-server` for tests (never a mock): on a free loopback port, in its own
//! directory, nothing persisted (`--save '' --appendonly no`), killed on every way out: the
//! guard's drop, a panic unwinding through it, or the test process dying (the server gets
//! SIGKILL when the thread that started it ends). [`RedisCluster`]: three such servers with
//! `--cluster-enabled yes`, joined by `redis-cli --cluster create`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`; dropping it kills it.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Arguments beyond the defaults (cluster mode).
    extra: Vec<String>,
}

use crate::{die_with_parent, free_port};

impl RedisServer {
    /// Starts a server on a free port with `dir` as its working directory (created).
    pub fn start(dir: &Path) -> RedisServer {
        Self::start_with(dir, |_| Vec::new())
    }

    /// [`RedisServer::start`] with more arguments, made from the port it got.
    pub fn start_with(dir: &Path, extra: impl Fn(u16) -> Vec<String>) -> RedisServer {
        for _ in 0..5 {
            let port = free_port();
            let mut server = RedisServer { port, dir: dir.to_path_buf(), child: None, extra: extra(port) };
            if server.spawn() {
                return server;
            }
        }
        panic!("redis-server did not start (is it installed? scripts/install-deps.sh installs it)");
    }

    /// Starts the server (again) on its port; returns whether it answers PING within 10 s.
    fn spawn(&mut self) -> bool {
        std::fs::create_dir_all(&self.dir).expect("redis dir");
        let log = std::fs::File::create(self.dir.join(format!("redis-{}.log", self.port))).expect("redis log");
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        die_with_parent(&mut cmd);
        let Ok(child) = cmd.spawn() else { return false };
        self.child = Some(child);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if self.ping() {
                return true;
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    self.child = None;
                    return false; // the port was taken meanwhile
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Whether the server answers PING now (`NOAUTH`, from one that wants a password, is an
    /// answer).
    pub fn ping(&self) -> bool {
        self.command(&["PING"]).is_some_and(|r| r.starts_with(b"+PONG") || r.starts_with(b"-NOAUTH"))
    }

    /// Sends one command (RESP) and returns the raw reply, or `None` when nothing answers.
    pub fn command(&self, args: &[&str]) -> Option<Vec<u8>> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.command_bytes(&bytes)
    }

    /// [`RedisServer::command`] with binary arguments.
    pub fn command_bytes(&self, args: &[&[u8]]) -> Option<Vec<u8>> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        stream.write_all(&req).ok()?;
        let mut reply = vec![0u8; 1 << 16];
        let n = stream.read(&mut reply).ok()?;
        reply.truncate(n);
        (n > 0).then_some(reply)
    }

    /// Kills the server (SIGKILL: an outage, nothing said to clients) and reaps it.
    /// The keys it holds (`KEYS *`), besides the mounts' measuring of the network: the registry
    /// of mounts (`...:mounts`, stamped once a second) and a link probe's value (`...:probe:...`).
    pub fn data_keys(&self) -> Vec<String> {
        let reply = self.command(&["KEYS", "*"]).unwrap_or_default();
        let text = String::from_utf8_lossy(&reply);
        // A RESP array: `*N`, then `$LEN` and the key for each.
        text.split("\r\n").filter(|l| !l.is_empty() && !l.starts_with(['*', '$'])).filter(|k| !k.ends_with(":mounts") && !k.contains(":probe:")).map(String::from).collect()
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty (nothing was persisted).
    pub fn restart(&mut self) {
        self.kill();
        let started = Instant::now();
        while !self.spawn() {
            assert!(started.elapsed() < Duration::from_secs(20), "redis-server did not restart on port {}", self.port);
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether the process is running.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A three-node Redis Cluster (masters only) on loopback; dropping it kills every node.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three cluster-enabled servers under `dir` and joins them (`redis-cli --cluster
    /// create`, from Debian's `redis-tools`); returns once the cluster says `cluster_state:ok`.
    pub fn start(dir: &Path) -> RedisCluster {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|i| {
                let node_dir = dir.join(format!("node{i}"));
                RedisServer::start_with(&node_dir, |port| {
                    ["--cluster-enabled", "yes", "--cluster-config-file", &format!("nodes-{port}.conf"), "--cluster-node-timeout", "2000"]
                        .map(String::from)
                        .to_vec()
                })
            })
            .collect();
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli (redis-tools) runs");
        assert!(out.status.success(), "redis-cli --cluster create failed: {}", String::from_utf8_lossy(&out.stdout));
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// Kills every node (SIGKILL).
    pub fn kill(&mut self) {
        for n in &mut self.nodes {
            n.kill();
        }
    }

    /// Starts every node again on its port, empty; each reads back its cluster configuration
    /// (`nodes-PORT.conf` in its directory). Returns once the cluster is `ok` again.
    pub fn restart(&mut self) {
        for n in &mut self.nodes {
            n.restart();
        }
        self.wait_ok();
    }

    fn wait_ok(&self) {
        let started = Instant::now();
        while !self.nodes.iter().all(|n| {
            n.command(&["CLUSTER", "INFO"]).is_some_and(|r| String::from_utf8_lossy(&r).contains("cluster_state:ok"))
        }) {
            assert!(started.elapsed() < Duration::from_secs(30), "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Keys held by each node, besides the mounts' measuring of the network ([`RedisServer::data_keys`]).
    pub fn keys_per_node(&self) -> Vec<u64> {
        self.nodes.iter().map(|n| n.data_keys().len() as u64).collect()
    }
}

/// What the mounted tests share through: one server, or a cluster.
pub trait SharedRedis {
    /// The `cache.remote.url` naming it.
    fn url(&self) -> String;
    /// Kills it (every node).
    fn kill(&mut self);
    /// Starts it again, empty, where it was; returns once it answers.
    fn restart(&mut self);
}

impl SharedRedis for RedisServer {
    fn url(&self) -> String {
        RedisServer::url(self)
    }
    fn kill(&mut self) {
        RedisServer::kill(self)
    }
    fn restart(&mut self) {
        RedisServer::restart(self)
    }
}

impl SharedRedis for RedisCluster {
    fn url(&self) -> String {
        RedisCluster::url(self)
    }
    fn kill(&mut self) {
        RedisCluster::kill(self)
    }
    fn restart(&mut self) {
        RedisCluster::restart(self)
    }
}
