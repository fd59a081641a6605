//! The network between this mount and the remote tier, measured for the planner's model (its
//! `nodes`, `b_nic` and `c_nw`):
//!
//! - **`nodes`**: the machines whose mounts share the tier for this dataset now. Once a second
//!   each mount stamps its id (`HOST:PID:START`) in a sorted set (`prepfs:1:{FP}:mounts`,
//!   scored by its clock in ms), drops members not stamped for [`MOUNT_STALE`], and reads the
//!   rest, in one pipeline; the distinct hosts are the nodes (mounts on one machine share its
//!   cores and link), and the mounts are shown too. A mount leaving removes its own. (Clocks
//!   more than a few seconds apart would miscount.)
//! - **`b_nic`**: the bytes a second one connection moves from the server. A probe value is
//!   grown from 64 KiB (by 8 each time, to at most 8 MiB or an eighth of the tier's size) until
//!   one read of it takes [`PROBE_LONG_ENOUGH`], then read three times; the best read counts.
//!   Measured when the tier first answers and every [`PROBE_EVERY`] after; the value lives
//!   [`PROBE_TTL`] at most.
//! - **`c_nw`**: what else the link carries. The interface the kernel routes the server's
//!   address through has its received bytes read from `/proc/net/dev` once a second; what this
//!   mount's remote calls received (and, on loopback, where they also arrive, sent) is taken
//!   off, and the rest is smoothed. Gradient synchronisation and other jobs' traffic show here.
//! - The stamp's round trip (`rtt_us`), for stats.
//!
//! All of it runs on the remote tier's writer thread, through the tier's bounded calls: while
//! the tier is down nothing is measured and the planner is given nothing.

use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::Inner;
use prepfs_base::sync::{LockExt, Mutex};

/// A mount not stamped for this long is no longer counted.
const MOUNT_STALE: Duration = Duration::from_secs(10);
/// How often the mount stamps, counts and reads the interface.
const TICK_EVERY: Duration = Duration::from_secs(1);
/// How often the link's rate is measured again.
const PROBE_EVERY: Duration = Duration::from_secs(600);
/// A probe read this long is long enough to be the link's rate, not its round trip.
const PROBE_LONG_ENOUGH: Duration = Duration::from_millis(20);
const PROBE_MIN: usize = 64 << 10;
const PROBE_MAX: usize = 8 << 20;
const PROBE_TTL_MS: u64 = 30_000;
/// How much of each new second's `c_nw` goes into the smoothed figure.
const SMOOTHING: f64 = 0.3;

/// What the planner is given: see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Network {
    /// Machines with a mount sharing the tier.
    pub nodes: u32,
    /// Bytes a second, one connection, from the server.
    pub b_nic: f64,
    /// Bytes a second the link received besides this mount's remote traffic.
    pub c_nw: f64,
}

/// The measurements, kept by the remote tier.
pub(super) struct NetworkState {
    id: String,
    mounts_key: Vec<u8>,
    probe_key: Vec<u8>,
    /// Largest probe value (an eighth of the tier's size, within the bounds).
    probe_max: usize,
    /// The interface towards the server, and whether it is loopback.
    iface: Option<(String, bool)>,
    nodes: AtomicU64,
    mounts: AtomicU64,
    b_nic: AtomicU64,
    c_nw: AtomicU64,
    rtt_ns: AtomicU64,
    /// When the last tick and the last probe ran (ms since the tier's epoch; 0: never).
    ticked_at_ms: AtomicU64,
    probed_at_ms: AtomicU64,
    /// The interface's received bytes and this mount's own, at the last reading.
    window: Mutex<Option<(Instant, u64, u64)>>,
    /// Bytes this mount's calls received from the server (values and bitmaps).
    pub(super) bytes_received: AtomicU64,
}

impl NetworkState {
    pub(super) fn new(url: &str, fingerprint: u64, size: u64) -> NetworkState {
        let id = format!("{}:{}:{:x}", hostname(), std::process::id(), SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64));
        NetworkState {
            mounts_key: format!("prepfs:1:{{{fingerprint:016x}}}:mounts").into_bytes(),
            probe_key: format!("prepfs:1:{{{fingerprint:016x}}}:probe:{id}").into_bytes(),
            id,
            probe_max: ((size / 8) as usize).clamp(PROBE_MIN, PROBE_MAX),
            iface: first_host(url).and_then(|(host, port)| interface_towards(&host, port)),
            nodes: AtomicU64::new(0),
            mounts: AtomicU64::new(0),
            b_nic: AtomicU64::new(0),
            c_nw: AtomicU64::new(0),
            rtt_ns: AtomicU64::new(0),
            ticked_at_ms: AtomicU64::new(0),
            probed_at_ms: AtomicU64::new(0),
            window: Mutex::new(None),
            bytes_received: AtomicU64::new(0),
        }
    }
}

fn load_f64(a: &AtomicU64) -> f64 {
    f64::from_bits(a.load(Ordering::Relaxed))
}

fn store_f64(a: &AtomicU64, v: f64) {
    a.store(v.to_bits(), Ordering::Relaxed);
}

impl Inner {
    /// One turn of the measurements (at most once a [`TICK_EVERY`]; the writer calls it).
    pub(super) fn tick_network(&self) {
        let net = &self.network;
        let now = self.now_ms().max(1);
        let at = net.ticked_at_ms.load(Ordering::Relaxed);
        if at != 0 && now.saturating_sub(at) < TICK_EVERY.as_millis() as u64 {
            return;
        }
        net.ticked_at_ms.store(now, Ordering::Relaxed);
        let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let started = Instant::now();
        let counted = self.with_conn(|c| {
            redis::pipe()
                .cmd("ZADD").arg(&net.mounts_key[..]).arg(stamp).arg(&net.id).ignore()
                .cmd("ZREMRANGEBYSCORE").arg(&net.mounts_key[..]).arg("-inf").arg(stamp.saturating_sub(MOUNT_STALE.as_millis() as u64)).ignore()
                .cmd("PEXPIRE").arg(&net.mounts_key[..]).arg(MOUNT_STALE.as_millis() as u64 * 6).ignore()
                .cmd("ZRANGE").arg(&net.mounts_key[..]).arg(0).arg(-1)
                .query::<(Vec<String>,)>(c)
        });
        let Some((mounts,)) = counted else { return };
        net.rtt_ns.store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        let hosts: std::collections::BTreeSet<&str> = mounts.iter().map(|m| m.rsplitn(3, ':').last().unwrap_or(m)).collect();
        net.mounts.store(mounts.len() as u64, Ordering::Relaxed);
        net.nodes.store(hosts.len().max(1) as u64, Ordering::Relaxed);
        let probed = net.probed_at_ms.load(Ordering::Relaxed);
        if probed == 0 || now.saturating_sub(probed) >= PROBE_EVERY.as_millis() as u64 {
            net.probed_at_ms.store(now, Ordering::Relaxed);
            if let Some(rate) = self.probe_link() {
                store_f64(&net.b_nic, rate);
            }
        }
        self.read_interface();
    }

    /// Measures the link's rate from the server (see the module documentation).
    fn probe_link(&self) -> Option<f64> {
        let net = &self.network;
        let mut size = PROBE_MIN;
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let value: Vec<u8> = (0..net.probe_max)
            .map(|_| {
                // Bytes no link compresses (xorshift).
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let read = |len: usize| -> Option<Duration> {
            let started = Instant::now();
            let got = self.with_conn(|c| redis::cmd("GET").arg(&net.probe_key[..]).query::<Option<Vec<u8>>>(c)).flatten()?;
            let took = started.elapsed();
            net.bytes_received.fetch_add(got.len() as u64, Ordering::Relaxed);
            (got.len() == len).then_some(took)
        };
        let best = loop {
            self.with_conn(|c| redis::cmd("SET").arg(&net.probe_key[..]).arg(&value[..size]).arg("PX").arg(PROBE_TTL_MS).query::<()>(c))?;
            let took = read(size)?;
            if took >= PROBE_LONG_ENOUGH || size >= net.probe_max {
                break (0..3).filter_map(|_| read(size)).min().unwrap_or(took).min(took);
            }
            size = (size * 8).min(net.probe_max);
        };
        self.with_conn(|c| redis::cmd("DEL").arg(&net.probe_key[..]).query::<u64>(c));
        Some(size as f64 / best.as_secs_f64().max(1e-9))
    }

    /// Reads the interface's received bytes and updates `c_nw`.
    fn read_interface(&self) {
        let net = &self.network;
        let Some((iface, loopback)) = &net.iface else { return };
        let Some(rx) = received_bytes(iface) else { return };
        let ours = net.bytes_received.load(Ordering::Relaxed) + if *loopback { self.bytes_written.load(Ordering::Relaxed) } else { 0 };
        let mut window = net.window.lock_or_recover();
        let now = Instant::now();
        if let Some((at, rx_then, ours_then)) = *window {
            let secs = now.duration_since(at).as_secs_f64();
            if secs > 0.0 {
                let other = rx.saturating_sub(rx_then).saturating_sub(ours.saturating_sub(ours_then)) as f64 / secs;
                let then = load_f64(&net.c_nw);
                store_f64(&net.c_nw, if then == 0.0 { other } else { then + SMOOTHING * (other - then) });
            }
        }
        *window = Some((now, rx, ours));
    }

    /// Takes this mount out of the count (its last call, at close).
    pub(super) fn leave_network(&self) {
        let net = &self.network;
        if net.ticked_at_ms.load(Ordering::Relaxed) != 0 {
            self.with_conn(|c| redis::cmd("ZREM").arg(&net.mounts_key[..]).arg(&net.id).query::<u64>(c));
        }
    }

    /// What the planner is given; none while the tier is down or before the link was measured.
    pub(super) fn network(&self) -> Option<Network> {
        let net = &self.network;
        let b_nic = load_f64(&net.b_nic);
        if self.down.load(Ordering::Acquire) || b_nic <= 0.0 {
            return None;
        }
        Some(Network { nodes: net.nodes.load(Ordering::Relaxed).max(1) as u32, b_nic, c_nw: load_f64(&net.c_nw) })
    }

    /// Figures for stats (`cache.remote.network`).
    pub(super) fn network_stats(&self) -> serde_json::Value {
        let net = &self.network;
        let measured = |v: f64| if v > 0.0 { json!(v) } else { serde_json::Value::Null };
        json!({
            "mounts": net.mounts.load(Ordering::Relaxed),
            "nodes": net.nodes.load(Ordering::Relaxed),
            "b_nic": measured(load_f64(&net.b_nic)),
            "c_nw": load_f64(&net.c_nw),
            "rtt_us": net.rtt_ns.load(Ordering::Relaxed) / 1000,
            "interface": net.iface.as_ref().map(|(name, _)| name.clone()),
            "bytes_received": net.bytes_received.load(Ordering::Relaxed),
        })
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or_else(|_| "host".to_string(), |h| h.trim().to_string())
}

/// The first server's host and port in a `cache.remote.url`.
fn first_host(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, hosts)| hosts);
    let first = rest.split([',', '/']).next()?;
    let (host, port) = match first.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') => (host, port.parse().ok()?),
        _ => (first, 6379),
    };
    Some((host.trim_start_matches('[').trim_end_matches(']').to_string(), port))
}

/// The interface the kernel would send to `host` through (a UDP socket's route: nothing is
/// sent), and whether it is loopback.
fn interface_towards(host: &str, port: u16) -> Option<(String, bool)> {
    let server = (host, port).to_socket_addrs().ok()?.next()?;
    let socket = UdpSocket::bind(if server.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }).ok()?;
    socket.connect(server).ok()?;
    let local = socket.local_addr().ok()?.ip();
    let name = interface_of(local)?;
    Some((name, local.is_loopback()))
}

/// The name of the interface that has address `ip`.
fn interface_of(ip: IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list`, freed below; each entry is read only while it lives.
    unsafe {
        if libc::getifaddrs(&mut list) != 0 {
            return None;
        }
        let mut found = None;
        let mut entry = list;
        while !entry.is_null() && found.is_none() {
            let e = &*entry;
            if !e.ifa_addr.is_null() {
                let family = i32::from((*e.ifa_addr).sa_family);
                let addr = match family {
                    libc::AF_INET => {
                        let a = &*(e.ifa_addr as *const libc::sockaddr_in);
                        Some(IpAddr::from(u32::from_be(a.sin_addr.s_addr).to_be_bytes()))
                    }
                    libc::AF_INET6 => {
                        let a = &*(e.ifa_addr as *const libc::sockaddr_in6);
                        Some(IpAddr::from(a.sin6_addr.s6_addr))
                    }
                    _ => None,
                };
                if addr == Some(ip) {
                    found = Some(std::ffi::CStr::from_ptr(e.ifa_name).to_string_lossy().into_owned());
                }
            }
            entry = e.ifa_next;
        }
        libc::freeifaddrs(list);
        found
    }
}

/// The bytes `iface` has received, from `/proc/net/dev`.
fn received_bytes(iface: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/net/dev").ok()?;
    text.lines().find_map(|line| {
        let (name, fields) = line.split_once(':')?;
        (name.trim() == iface).then(|| fields.split_whitespace().next()?.parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_servers_host_and_port_are_read_from_every_url_form() {
        assert_eq!(first_host("redis://127.0.0.1:6390/2"), Some(("127.0.0.1".into(), 6390)));
        assert_eq!(first_host("redis://user:pw@cache.local:7000"), Some(("cache.local".into(), 7000)));
        assert_eq!(first_host("redis://cache.local"), Some(("cache.local".into(), 6379)));
        assert_eq!(first_host("redis+cluster://h1:7001,h2:7002"), Some(("h1".into(), 7001)));
        assert_eq!(first_host("redis://[::1]:6390"), Some(("::1".into(), 6390)));
    }

    #[test]
    fn a_loopback_server_is_reached_through_the_loopback_interface_whose_bytes_are_counted() {
        let (name, loopback) = interface_towards("127.0.0.1", 6379).expect("a route to loopback");
        assert!(loopback);
        assert!(received_bytes(&name).is_some(), "{name} is not in /proc/net/dev");
    }
}
