//! The `--metrics-addr` HTTP endpoint: `GET /metrics` answered with the exposition, `GET
//! /healthz` with `ok` while the process answers, `GET /readyz` with `ready` while it serves
//! (503 and why not while it starts, drains or hands over: issue 53).
//!
//! Owns: the listening socket and every connection it accepted, multiplexed with poll(2) on the
//! one thread that runs [`serve`] (the `prepfs-metrics` worker `tasks::Workers` starts, stops by
//! its `stop` flag and joins at unmount). No client can starve a scrape: each connection has a
//! deadline for its whole request (from accept to the end of its head) and another for its whole
//! answer, a head is capped in size, at most [`LIMITS`]`.max_connections` are held (when full, the
//! oldest is closed to take a new one, so a flood of silent connections cannot refuse a scrape),
//! and answers are written without blocking, their progress kept. The body is made per request.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The endpoint's bounds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Connections held at once; when full, the oldest is closed to accept a new one.
    pub(crate) max_connections: usize,
    /// From accept to the end of the request's head.
    pub(crate) request_deadline: Duration,
    /// From the end of the head to the answer's last byte sent.
    pub(crate) response_deadline: Duration,
    /// The most bytes of a request head; a longer one is answered 431.
    pub(crate) max_request: usize,
}

/// The bounds `prepfs mount --metrics-addr` serves with.
pub(crate) const LIMITS: Limits = Limits {
    max_connections: 1024,
    request_deadline: Duration::from_secs(2),
    response_deadline: Duration::from_secs(10),
    max_request: 8 * 1024,
};

/// The longest wait in poll(2) before `stop` is looked at again.
const TICK: Duration = Duration::from_millis(50);

/// Accepts per round: the connections held are read between a flood's accepts, so a request
/// that came in is read before [`LIMITS`]`.max_connections` newer ones could push it out.
const ACCEPTS_PER_ROUND: usize = 256;

/// Connections the kernel may queue for accept.
const BACKLOG: i32 = 4096;

/// What the endpoint answers with: the exposition, and whether the process is ready.
pub trait Answers {
    /// The exposition (`GET /metrics`).
    fn metrics(&self) -> String;
    /// `Ok` while ready (`GET /readyz`: 200), else why not (503).
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }
}

/// A closure making the exposition: always ready (`prepfs worker`'s endpoint).
impl<F: Fn() -> String> Answers for F {
    fn metrics(&self) -> String {
        self()
    }
}

/// The exposition's maker and the readiness check, as [`Answers`] (a mount's endpoint).
pub struct Checked<M, R>(pub M, pub R);

impl<M: Fn() -> String, R: Fn() -> Result<(), String>> Answers for Checked<M, R> {
    fn metrics(&self) -> String {
        (self.0)()
    }
    fn ready(&self) -> Result<(), String> {
        (self.1)()
    }
}

/// Answers `GET /metrics` (and `/healthz`, `/readyz`) on `listener` from `body` until `stop` is
/// set.
pub fn serve(listener: TcpListener, stop: &AtomicBool, body: impl Answers) {
    serve_with(listener, stop, body, LIMITS);
}

/// [`serve`] within `limits`.
pub(crate) fn serve_with(listener: TcpListener, stop: &AtomicBool, body: impl Answers, limits: Limits) {
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!(error = %e, "metrics endpoint: cannot poll the listener; not serving");
        return;
    }
    // std listens with a backlog of 128: a flood of connects fills it between two rounds, and
    // the kernel then drops new SYNs (a scrape's too, retried a second later). Listening again
    // on a listening socket only sets the backlog (the kernel caps it at net.core.somaxconn).
    // SAFETY: listen(2) on a descriptor `listener` owns and keeps open.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } != 0 {
        tracing::debug!(error = %io::Error::last_os_error(), "metrics endpoint: the listen backlog stays std's");
    }
    let mut held: VecDeque<Connection> = VecDeque::new();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        held.retain(|c| c.deadline > now);
        fds.clear();
        fds.push(libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        fds.extend(held.iter().map(|c| libc::pollfd { fd: c.stream.as_raw_fd(), events: c.interest(), revents: 0 }));
        let wait = held.iter().map(|c| c.deadline.saturating_duration_since(now)).min().unwrap_or(TICK).min(TICK);
        // At least 1 ms, so a deadline just ahead is not polled for with a busy loop.
        let timeout_ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX).max(1);
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: `fds` is a live, initialised array of `nfds` pollfd structs that poll may
        // write `revents` into; nothing else touches it during the call.
        if unsafe { libc::poll(fds.as_mut_ptr(), nfds, timeout_ms) } < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::warn!(error = %e, "metrics endpoint: poll failed");
                std::thread::sleep(TICK);
            }
            continue;
        }
        // The connections first (in the order polled), then the listener.
        let mut events = fds[1..].iter().map(|p| p.revents);
        held.retain_mut(|c| match events.next() {
            Some(0) | None => true,
            Some(_) => c.progress(&body, &limits),
        });
        if fds[0].revents != 0 {
            accept_some(&listener, &mut held, &limits);
        }
    }
}

/// Accepts what is waiting, up to [`ACCEPTS_PER_ROUND`], closing the oldest connection held
/// for each one past the cap.
fn accept_some(listener: &TcpListener, held: &mut VecDeque<Connection>, limits: &Limits) {
    for _ in 0..ACCEPTS_PER_ROUND.min(limits.max_connections / 2).max(1) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = stream.set_nonblocking(true) {
                    tracing::debug!(error = %e, "metrics endpoint: cannot poll a connection; closed");
                    continue;
                }
                while held.len() >= limits.max_connections.max(1) {
                    held.pop_front();
                }
                held.push_back(Connection::new(stream, limits));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Out of descriptors, or a connection reset before its accept: look again next round.
            Err(e) => {
                tracing::debug!(error = %e, "metrics endpoint: accept failed");
                return;
            }
        }
    }
}

/// One accepted connection: reading its request head, then writing the answer.
struct Connection {
    stream: TcpStream,
    /// When it is closed, done or not: the request's deadline, then the answer's.
    deadline: Instant,
    state: State,
}

enum State {
    /// The request head so far.
    Head(Vec<u8>),
    /// The whole answer, and how much of it was sent.
    Answer { bytes: Vec<u8>, sent: usize },
}

impl Connection {
    fn new(stream: TcpStream, limits: &Limits) -> Connection {
        Connection { stream, deadline: Instant::now() + limits.request_deadline, state: State::Head(Vec::new()) }
    }

    fn interest(&self) -> i16 {
        match self.state {
            State::Head(_) => libc::POLLIN,
            State::Answer { .. } => libc::POLLOUT,
        }
    }

    /// Reads or writes what the socket takes now, without blocking; whether to keep it.
    fn progress(&mut self, body: &impl Answers, limits: &Limits) -> bool {
        match self.step(body, limits) {
            Ok(keep) => keep,
            Err(e) => {
                tracing::debug!(error = %e, "metrics endpoint: a connection failed");
                false
            }
        }
    }

    fn step(&mut self, body: &impl Answers, limits: &Limits) -> io::Result<bool> {
        if let State::Head(head) = &mut self.state {
            let mut buf = [0u8; 4096];
            let complete = loop {
                match self.stream.read(&mut buf) {
                    // The client stopped sending: answer what came, if anything did.
                    Ok(0) if head.is_empty() => return Ok(false),
                    Ok(0) => break true,
                    Ok(n) => {
                        head.extend_from_slice(&buf[..n]);
                        if head_ends(head) {
                            break true;
                        }
                        if head.len() > limits.max_request {
                            break false;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            };
            let bytes = if complete {
                answer(head, body)
            } else {
                response("431 Request Header Fields Too Large", "text/plain; charset=utf-8", "request head too large\n")
            };
            self.state = State::Answer { bytes, sent: 0 };
            self.deadline = Instant::now() + limits.response_deadline;
        }
        let State::Answer { bytes, sent } = &mut self.state else { return Ok(true) };
        while *sent < bytes.len() {
            match self.stream.write(&bytes[*sent..]) {
                Ok(0) => return Ok(false),
                Ok(n) => *sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // All sent: the connection closes as it is dropped (`Connection: close`).
        Ok(false)
    }
}

/// Whether `head` holds the blank line that ends a request head.
fn head_ends(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// The answer to a request head: the exposition for `GET /metrics`, the process's health and
/// readiness for `/healthz` and `/readyz`, else 404 or 405.
fn answer(head: &[u8], body: &impl Answers) -> Vec<u8> {
    let request = String::from_utf8_lossy(head);
    let mut words = request.lines().next().unwrap_or_default().split(' ');
    let (method, target) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let path = target.split('?').next().unwrap_or_default();
    match (method, path) {
        ("GET", "/metrics") => response("200 OK", "text/plain; version=0.0.4; charset=utf-8", &body.metrics()),
        // The process answers: it is alive (a wedged one does not get this far).
        ("GET", "/healthz") => response("200 OK", "text/plain; charset=utf-8", "ok\n"),
        ("GET", "/readyz") => match body.ready() {
            Ok(()) => response("200 OK", "text/plain; charset=utf-8", "ready\n"),
            Err(why) => response("503 Service Unavailable", "text/plain; charset=utf-8", &format!("not ready: {why}\n")),
        },
        ("GET", _) => response("404 Not Found", "text/plain; charset=utf-8", "prepfs serves /metrics, /healthz and /readyz\n"),
        _ => response("405 Method Not Allowed", "text/plain; charset=utf-8", "GET /metrics\n"),
    }
}

fn response(status: &str, content_type: &str, text: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use std::sync::Arc;

    /// A bound far under the old per-read 2 s timeout: a scrape that takes longer was starved.
    const SCRAPE_BOUND: Duration = Duration::from_millis(1500);

    /// The endpoint on a loopback port, on its own named thread; stopped and joined on drop.
    struct Server {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Server {
        fn start(limits: Limits) -> Server {
            Server::start_answering(limits, || "prepfs_samples 7\n".to_owned())
        }

        fn start_answering(limits: Limits, answers: impl Answers + Send + 'static) -> Server {
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let addr = listener.local_addr().expect("addr");
            let stop = Arc::new(AtomicBool::new(false));
            let flag = Arc::clone(&stop);
            let thread = std::thread::Builder::new()
                .name("test-metrics-http".into())
                .spawn(move || serve_with(listener, &flag, answers, limits))
                .expect("spawn");
            Server { addr, stop, thread: Some(thread) }
        }

        /// Sets `stop` and asserts the thread ends within `bound`, then joins it.
        fn stop_within(mut self, bound: Duration) {
            self.stop.store(true, Ordering::SeqCst);
            let thread = self.thread.take().expect("running");
            let asked = Instant::now();
            while !thread.is_finished() {
                assert!(asked.elapsed() < bound, "the endpoint did not stop within {bound:?}");
                std::thread::sleep(Duration::from_millis(5));
            }
            thread.join().expect("the endpoint's thread ends cleanly");
        }

        /// One `GET path`, its answer and how long it took; panics past [`SCRAPE_BOUND`].
        fn get(&self, path: &str) -> (String, Duration) {
            let started = Instant::now();
            let mut s = TcpStream::connect_timeout(&self.addr, SCRAPE_BOUND).expect("connect");
            s.set_read_timeout(Some(SCRAPE_BOUND)).expect("timeout");
            s.set_write_timeout(Some(SCRAPE_BOUND)).expect("timeout");
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap_or_else(|e| panic!("no whole answer within {SCRAPE_BOUND:?}: {e}"));
            (answer, started.elapsed())
        }

        /// A scrape of `/metrics`, asserted whole and within [`SCRAPE_BOUND`].
        fn scrape(&self) -> Duration {
            let (answer, took) = self.get("/metrics");
            assert!(answer.starts_with("HTTP/1.1 200 OK\r\n") && answer.ends_with("\r\n\r\nprepfs_samples 7\n"), "{answer}");
            assert!(took < SCRAPE_BOUND, "a scrape took {took:?}");
            took
        }
    }

    impl Drop for Server {
        /// Stops and joins the thread; on a failing test's way out, waits a second at most (a
        /// server stuck on a client must fail the test, not hang it) and leaves it behind.
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
            let Some(t) = self.thread.take() else { return };
            let asked = Instant::now();
            while std::thread::panicking() && !t.is_finished() && asked.elapsed() < Duration::from_secs(1) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if !std::thread::panicking() || t.is_finished() {
                let _ = t.join();
            }
        }
    }

    #[test]
    fn healthz_answers_ok_and_readyz_says_whether_the_mount_serves() {
        let ready = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ready);
        let checked = Checked(|| "prepfs_samples 7\n".to_owned(), move || if flag.load(Ordering::SeqCst) { Ok(()) } else { Err("starting".to_string()) });
        let server = Server::start_answering(LIMITS, checked);
        let (health, _) = server.get("/healthz");
        assert!(health.starts_with("HTTP/1.1 200 OK\r\n") && health.ends_with("\r\n\r\nok\n"), "{health}");
        let (starting, _) = server.get("/readyz");
        assert!(starting.starts_with("HTTP/1.1 503 ") && starting.ends_with("not ready: starting\n"), "{starting}");
        ready.store(true, Ordering::SeqCst);
        let (serving, _) = server.get("/readyz");
        assert!(serving.starts_with("HTTP/1.1 200 OK\r\n") && serving.ends_with("\r\n\r\nready\n"), "{serving}");
        server.scrape();
        assert!(server.get("/other").0.starts_with("HTTP/1.1 404"), "other paths stay unknown");
    }

    /// Sets its flag when dropped: the test's clients stop on every way out.
    struct SetOnDrop(Arc<AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_endpoint_answers_get_metrics_and_stops_when_asked() {
        let server = Server::start(LIMITS);
        let (ok, _) = server.get("/metrics");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.contains("version=0.0.4") && ok.ends_with("\r\n\r\nprepfs_samples 7\n"), "{ok}");
        assert!(server.get("/").0.starts_with("HTTP/1.1 404"));
        // Silent connections held do not keep it from stopping.
        let _silent: Vec<_> = (0..10).map(|_| TcpStream::connect(server.addr).expect("connect")).collect();
        std::thread::sleep(Duration::from_millis(100));
        server.stop_within(Duration::from_secs(1));
    }

    #[test]
    fn a_slowloris_client_costs_a_scrape_nothing() {
        let done = Arc::new(AtomicBool::new(false));
        let _stop_clients = SetOnDrop(Arc::clone(&done));
        let server = Server::start(LIMITS);
        // Three clients each send a request a byte at a time, a byte every 300 ms (well inside
        // a per-read timeout), connecting again whenever the server closes them.
        let slow: Vec<_> = (0..3)
            .map(|_| {
                let (addr, done) = (server.addr, Arc::clone(&done));
                std::thread::spawn(move || {
                    while !done.load(Ordering::SeqCst) {
                        let Ok(mut s) = TcpStream::connect(addr) else { continue };
                        for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                            if done.load(Ordering::SeqCst) || s.write_all(&[*byte]).is_err() {
                                break;
                            }
                            std::thread::sleep(Duration::from_millis(300));
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        // Scrapes across more than one request deadline of the slow clients.
        let started = Instant::now();
        let mut scrapes = 0;
        while started.elapsed() < Duration::from_secs(3) {
            server.scrape();
            scrapes += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        done.store(true, Ordering::SeqCst);
        for t in slow {
            t.join().expect("slow client");
        }
        assert!(scrapes >= 10, "{scrapes} scrapes");
        server.stop_within(Duration::from_secs(1));
    }

    #[test]
    fn a_request_that_does_not_end_within_its_deadline_is_closed() {
        let server = Server::start(LIMITS);
        let mut s = TcpStream::connect(server.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_millis(100))).expect("timeout");
        let started = Instant::now();
        let closed = loop {
            // A byte every 200 ms: each read is quick, the request never ends.
            if s.write_all(b"x").is_err() {
                break started.elapsed();
            }
            let mut buf = [0u8; 64];
            match s.read(&mut buf) {
                Ok(0) => break started.elapsed(),
                Ok(_) => panic!("an answer to a request that never ended"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {}
                Err(_) => break started.elapsed(),
            }
            assert!(started.elapsed() < Duration::from_secs(4), "still open after 4 s");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(closed >= LIMITS.request_deadline - Duration::from_millis(100), "closed early: {closed:?}");
        server.stop_within(Duration::from_secs(1));
    }

    #[test]
    fn a_scrape_is_answered_while_ten_thousand_silent_connections_are_open() {
        // Each connection is two descriptors in this process (both ends), and the server holds
        // up to its cap: raise the limit to the hard one, and use as many as it allows.
        let limit = prepfs_pixels::served::raise_fd_limit().expect("RLIMIT_NOFILE");
        let wanted = 10_000usize;
        let room = usize::try_from(limit).unwrap_or(usize::MAX).saturating_sub(LIMITS.max_connections + 256);
        let count = wanted.min(room);
        if count < wanted {
            eprintln!("RLIMIT_NOFILE's hard limit is {limit}: {count} silent connections, not {wanted}");
        }
        let server = Server::start(LIMITS);
        let mut silent = Vec::with_capacity(count);
        let started = Instant::now();
        for i in 0..count {
            // A server that takes connections one at a time holds each connect up: fail, not hang.
            assert!(started.elapsed() < Duration::from_secs(60), "{i} of {count} connected after 60 s: not accepted");
            silent.push(TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).expect("connect"));
            if i % 2000 == 1999 {
                server.scrape();
            }
        }
        for _ in 0..5 {
            server.scrape();
        }
        // More silent ones while scraping: still answered.
        for _ in 0..count / 10 {
            silent.push(TcpStream::connect_timeout(&server.addr, Duration::from_secs(5)).expect("connect"));
        }
        server.scrape();
        assert!(silent.len() >= count.min(1000), "{} silent connections", silent.len());
        server.stop_within(Duration::from_secs(1));
    }

    #[test]
    fn the_oldest_connection_is_closed_when_the_cap_is_reached() {
        let limits = Limits { max_connections: 4, request_deadline: Duration::from_secs(30), ..LIMITS };
        let server = Server::start(limits);
        let mut first = TcpStream::connect(server.addr).expect("connect");
        std::thread::sleep(Duration::from_millis(100));
        let _others: Vec<_> = (0..4).map(|_| TcpStream::connect(server.addr).expect("connect")).collect();
        first.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let started = Instant::now();
        let mut buf = [0u8; 16];
        let got = first.read(&mut buf);
        assert!(matches!(got, Ok(0)) || got.is_err(), "the oldest is closed: {got:?}");
        // Well before the 2 s after which a request deadline (or the old per-read timeout) would.
        assert!(started.elapsed() < Duration::from_secs(1), "closed for the cap, not a deadline");
        server.scrape();
        server.stop_within(Duration::from_secs(1));
    }

    #[test]
    fn a_request_head_past_its_size_cap_is_refused() {
        let server = Server::start(LIMITS);
        let mut s = TcpStream::connect(server.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        // One byte past the cap, all of which the server reads before it answers (what it left
        // unread would reset the connection under its answer).
        let mut head = b"GET /metrics HTTP/1.1\r\n".to_vec();
        head.resize(LIMITS.max_request + 1, b'a');
        s.write_all(&head).expect("send");
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        server.stop_within(Duration::from_secs(1));
    }
}
