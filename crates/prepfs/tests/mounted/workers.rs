//! Mounted end-to-end tests of `prepfs worker` (issue 52) on a real `redis-server`: a worker
//! process makes outputs a mount serves, once each and never two alike in an epoch; a worker
//! killed with SIGKILL halfway through an epoch and started again loses no read; a mount with
//! no worker asks for nothing; a worker refuses a config without the tier, and items written
//! without the secret.

use crate::common;

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{augmented_files, make_dataset, prepfs_bin, write_config, Mounted};
use prepfs_test_servers::RedisServer;

const LIMIT: Duration = Duration::from_secs(120);

/// A running `prepfs worker`; dropping it kills and reaps it.
struct WorkerProc {
    child: Child,
    log: PathBuf,
}

impl WorkerProc {
    /// Starts `prepfs worker` named `name` with `config` over `source` (and `extra` arguments),
    /// and waits until it says it serves.
    fn start(config: &Path, source: &Path, name: &str, extra: &[&str]) -> WorkerProc {
        let log = config.with_file_name(format!("worker-{name}.log"));
        let child = Command::new(prepfs_bin())
            .args(["worker", "--config"])
            .arg(config)
            .arg("--source")
            .arg(source)
            .args(["--name", name])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).expect("log"))
            .spawn()
            .expect("spawn prepfs worker");
        let mut w = WorkerProc { child, log };
        let started = Instant::now();
        while !w.log().contains("serving") {
            if let Ok(Some(status)) = w.child.try_wait() {
                panic!("prepfs worker exited before serving ({status}): {}", w.log());
            }
            assert!(started.elapsed() < Duration::from_secs(60), "prepfs worker did not come up: {}", w.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        w
    }

    fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGKILL: no drain, its items left in the queue's pending list.
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, and its exit status once it drained.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: a signal to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (status, self.log());
            }
            assert!(started.elapsed() < Duration::from_secs(30), "the worker did not stop on SIGTERM: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for WorkerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The deployment's secret (0600) under `dir`.
fn secret(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("secret");
    fs::write(&path, b"the worker tests' shared secret!").expect("write");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

/// A config sharing the server at `url`: memory for the whole set's outputs, no refill of its
/// own (so what is kept ahead is the worker's), `placement` as given.
fn config(dir: &Path, url: &str, placement: &str) -> PathBuf {
    fs::create_dir_all(dir).expect("mkdir");
    let secret = secret(dir);
    write_config(
        dir,
        &format!(
            "seed: 5\nthreads: 2\nplacement: {placement}\ncache:\n  memory: 256MiB\n  refill: false\n  remote: {{ url: \"{url}\", size: 1GiB, secret_file: {} }}\n",
            secret.display()
        ),
    )
}

/// Waits until `pred` holds of the mount's `remote_work` figures.
fn wait_remote_work(mnt: &Mounted, what: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let work = mnt.stats()["remote_work"].clone();
        if pred(&work) {
            return work;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{what}: {work}\n{}", mnt.log());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads `files` on two threads (two readers); every output's bytes.
fn read_two_ways(mnt: &Mounted, files: &[PathBuf]) -> Vec<Vec<u8>> {
    let (a, b) = files.split_at(files.len() / 2);
    std::thread::scope(|s| {
        let read = |part: &[PathBuf]| part.iter().map(|f| fs::read(f).unwrap_or_else(|e| panic!("{}: {e}\n{}", f.display(), mnt.log()))).collect::<Vec<_>>();
        let other = s.spawn(move || read(b));
        let mut out = read(a);
        out.extend(other.join().expect("reader"));
        out
    })
}

/// Every output distinct: no draw served twice.
fn assert_all_distinct(outputs: &[Vec<u8>], what: &str) {
    let distinct: HashSet<&Vec<u8>> = outputs.iter().collect();
    assert_eq!(distinct.len(), outputs.len(), "{what}: two outputs of the epoch are byte-identical");
}

#[test]
fn a_workers_outputs_are_served_once_each_and_a_worker_killed_halfway_loses_no_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    let source = make_dataset(tmp.path(), 4, 30, false);
    let cfg = config(&tmp.path().join("m"), &server.url(), "auto");
    let mnt = Mounted::start(&tmp.path().join("m"), &cfg, &source, LIMIT);
    let worker = WorkerProc::start(&cfg, &source, "w1", &[]);
    let files = augmented_files(&mnt);
    assert_eq!(files.len(), 120);

    // A first reader comes: the mount asks, the worker makes, the stock fills.
    let first = fs::read(&files[0]).expect("read");
    let work = wait_remote_work(&mnt, "the worker's outputs arrive", |w| w["done"].as_u64().unwrap_or(0) >= 20);
    assert_eq!(work["workers_alive"], 1, "{work}");
    assert_eq!(work["workers"][0]["name"], "w1", "{work}");
    // The rest of epoch 1, two readers: every read succeeds, outputs kept ahead are served.
    let mut epoch1 = vec![first];
    epoch1.extend(read_two_ways(&mnt, &files[1..]));
    assert_all_distinct(&epoch1, "epoch 1");
    let work = &mnt.stats()["remote_work"];
    assert!(work["done"].as_u64().unwrap() >= 20, "{work}");
    assert_eq!(work["lost"], 0, "{work}");
    // The same figures in the exposition, and the worker by name.
    let metrics = fs::read_to_string(mnt.path(".prepfs/metrics")).expect("metrics");
    assert!(metrics.contains("prepfs_remote_work_items_total{state=\"done\"} "), "{metrics}");
    assert!(metrics.contains("prepfs_remote_worker_rate{worker=\"w1\",host="), "{metrics}");
    // `prepfs stats` says who works and what came of it.
    let summary = Command::new(prepfs_bin()).arg("stats").arg(&mnt.mountpoint).output().expect("prepfs stats");
    let summary = String::from_utf8_lossy(&summary.stdout);
    assert!(summary.contains("workers      1 alive (w1 "), "{summary}");

    // Epoch 2: SIGKILL the worker halfway, start another: no read fails, none repeats.
    let (a, b) = files.split_at(files.len() / 2);
    let mut epoch2 = read_two_ways(&mnt, a);
    worker.kill();
    let again = WorkerProc::start(&cfg, &source, "w2", &[]);
    epoch2.extend(read_two_ways(&mnt, b));
    assert_all_distinct(&epoch2, "epoch 2");
    // No output served in epoch 1 comes again in epoch 2 (fresh draws).
    let seen: HashSet<&Vec<u8>> = epoch1.iter().collect();
    assert!(epoch2.iter().all(|o| !seen.contains(o)), "an output of epoch 1 was served again in epoch 2");
    // The new worker is heard from and makes what the mount asks.
    wait_remote_work(&mnt, "the second worker is alive", |w| w["workers"].as_array().is_some_and(|ws| ws.iter().any(|x| x["name"] == "w2")));
    let (status, log) = again.terminate();
    assert!(status.success(), "the worker's SIGTERM exit: {status}\n{log}");
    assert!(log.contains("stopped:"), "{log}");
}

#[test]
fn with_no_worker_alive_the_mount_asks_for_nothing_and_serves_alone() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    let source = make_dataset(tmp.path(), 2, 20, false);
    let cfg = config(&tmp.path().join("m"), &server.url(), "auto");
    let mnt = Mounted::start(&tmp.path().join("m"), &cfg, &source, LIMIT);
    let files = augmented_files(&mnt);
    let outputs = read_two_ways(&mnt, &files);
    assert_eq!(outputs.len(), 40);
    assert_all_distinct(&outputs, "epoch 1");
    let work = wait_remote_work(&mnt, "the decision is taken", |w| w["why"] == "no worker alive");
    assert_eq!(work["queued"], 0, "{work}");
    assert_eq!(work["asking"], false, "{work}");
    assert_eq!(work["placement"], "auto", "{work}");

    // Garbage pushed as results to this mount (a worker of another format, or with no secret):
    // counted, never served.
    let stats = mnt.stats();
    let fp = stats["cache"]["remote"]["fingerprint"].as_str().expect("fingerprint").to_string();
    let mount = work["mount"].as_str().expect("mount id").to_string();
    let done = format!("prepfs:1:{{{fp}}}:done:{mount}");
    server.command(&["RPUSH", &done, "short", "\u{1}\0\0\0\0\0\0\0PFRM garbage that is no value at all"]).expect("rpush");
    let work = wait_remote_work(&mnt, "the garbage is counted", |w| w["dropped"] == 2);
    assert_eq!(work["done"], 0, "{work}");
    let again = read_two_ways(&mnt, &files);
    assert_all_distinct(&again, "epoch 2");
}

/// `GET /metrics` on `addr`: the body.
fn scrape(addr: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    text
}

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

#[test]
fn a_worker_refuses_a_config_without_the_tier_and_items_written_without_the_secret() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 4, false);
    let plain = write_config(tmp.path(), "seed: 1\n");
    let out = Command::new(prepfs_bin()).args(["worker", "--config"]).arg(&plain).arg("--source").arg(&source).output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cache.remote") && err.contains("secret_file"), "{err}");

    let server = RedisServer::start(&tmp.path().join("redis"));
    let cfg = config(&tmp.path().join("m"), &server.url(), "auto");
    let addr = free_addr();
    let worker = WorkerProc::start(&cfg, &source, "w1", &["--metrics-addr", &addr]);
    // The dataset's fingerprint, as the worker logs it: items go on its stream.
    let log = worker.log();
    let fp = log.split("fingerprint=").nth(1).and_then(|s| s.get(..16)).unwrap_or_else(|| panic!("no fingerprint logged: {log}")).to_string();
    let stream = format!("prepfs:1:{{{fp}}}:work");
    for garbage in ["not an item", "PFWI\u{1}forged without the secret................................................"] {
        server.command(&["XADD", &stream, "*", "i", garbage]).expect("xadd");
    }
    let started = Instant::now();
    while !scrape(&addr).contains("prepfs_worker_items_total{outcome=\"refused\"} 2") {
        assert!(started.elapsed() < Duration::from_secs(30), "{}\n{}", scrape(&addr), worker.log());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(scrape(&addr).contains("prepfs_worker_items_total{outcome=\"done\"} 0"));
    let (status, _) = worker.terminate();
    assert!(status.success());
}

#[test]
fn with_the_server_gone_mid_epoch_the_mount_serves_alone_with_no_read_error() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut server = RedisServer::start(&tmp.path().join("redis"));
    let source = make_dataset(tmp.path(), 2, 30, false);
    let cfg = config(&tmp.path().join("m"), &server.url(), "auto");
    let mnt = Mounted::start(&tmp.path().join("m"), &cfg, &source, LIMIT);
    let _worker = WorkerProc::start(&cfg, &source, "w1", &[]);
    let files = augmented_files(&mnt);
    let mut outputs = vec![fs::read(&files[0]).expect("read")];
    wait_remote_work(&mnt, "the worker's outputs arrive", |w| w["done"].as_u64().unwrap_or(0) >= 5);
    // The server dies with items outstanding: every read is still served, from this machine.
    server.kill();
    outputs.extend(read_two_ways(&mnt, &files[1..]));
    assert_eq!(outputs.len(), 60);
    assert_all_distinct(&outputs, "epoch 1");
    let work = wait_remote_work(&mnt, "the mount stops asking", |w| w["why"] == "the remote tier does not answer");
    assert_eq!(work["asking"], false, "{work}");
}

#[test]
fn a_workers_outputs_reach_a_recipes_view_and_a_jobs_view() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let server = RedisServer::start(&tmp.path().join("redis"));
    let source = make_dataset(tmp.path(), 2, 30, false);
    let dir = tmp.path().join("m");
    fs::create_dir_all(&dir).expect("mkdir");
    let secret = secret(&dir);
    // No refill and no prefetch of its own: what the views are served kept ahead is the worker's.
    let cfg = write_config(
        &dir,
        &format!(
            "seed: 6\nthreads: 2\njobs: {{ prefetch_window: 0 }}\nrecipes:\n  small: {{ augment: [ {{random_resized_crop: {{size: 32}}}} ] }}\ncache:\n  memory: 256MiB\n  refill: false\n  remote: {{ url: \"{}\", size: 1GiB, secret_file: {} }}\n",
            server.url(),
            secret.display()
        ),
    );
    let mnt = Mounted::start(&dir, &cfg, &source, LIMIT);
    let _worker = WorkerProc::start(&cfg, &source, "w1", &[]);
    let in_view = |view: &str| {
        let mut files: Vec<PathBuf> = fs::read_dir(mnt.path(view))
            .expect("view")
            .flat_map(|class| fs::read_dir(class.expect("class").path()).expect("class dir"))
            .map(|f| f.expect("file").path())
            .collect();
        files.sort();
        files
    };
    let (recipe, job) = (in_view("small"), in_view("jobs/j1/augmented"));
    assert_eq!((recipe.len(), job.len()), (60, 60));
    // A first read in each view: both pipelines are read, the mount asks for both.
    let mut recipe_out = vec![fs::read(&recipe[0]).expect("read")];
    let mut job_out = vec![fs::read(&job[0]).expect("read")];
    wait_remote_work(&mnt, "the worker's outputs arrive", |w| w["done"].as_u64().unwrap_or(0) >= 30);
    recipe_out.extend(read_two_ways(&mnt, &recipe[1..]));
    job_out.extend(read_two_ways(&mnt, &job[1..]));
    assert_all_distinct(&recipe_out, "the recipe's epoch");
    assert_all_distinct(&job_out, "the job's epoch");
    let stats = mnt.stats();
    let kept = stats["recipes"]["small"]["served_kept"].as_u64().unwrap_or_else(|| panic!("recipes.small.served_kept: {}", stats["recipes"]));
    assert!(kept > 0, "the recipe's view was served none of the worker's outputs: {}\n{}", stats["recipes"], stats["remote_work"]);
    let job_stats = stats["jobs"]["active"].as_array().and_then(|a| a.iter().find(|j| j["name"] == "j1")).cloned().expect("job j1");
    assert!(job_stats["hits"]["augmented"].as_u64().unwrap_or(0) > 0, "the job's view was served none of the worker's outputs: {job_stats}\n{}", stats["remote_work"]);
    // Each recipe output is the recipe's: 32 x 32 (a PPM's header says so).
    assert!(recipe_out.iter().all(|o| o.starts_with(b"P6\n32 32\n")), "a recipe output of another size");
}
