//! The `prepfs` command: `mount` a dataset, print a mount's `stats`, plan and check configs.
//!
//! `prepfs SOURCE MOUNTPOINT -o OPTIONS` (no subcommand) is the call `mount.fuse3` and the
//! `mount.prepfs` helper make for `mount -t fuse.prepfs` and `/etc/fstab`: a mount that goes to
//! the background once it serves.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use prepfs_core::config::{Config, HideBad, Overrides, Validate};
use prepfs::mount::{Lifecycle, MountError, Ready};

/// Large Rust buffers (the cache's) get mappings of their own; the C decoders' per-image memory
/// is reused from the heap (`prepfs_base::alloc`).
#[global_allocator]
static ALLOCATOR: prepfs_base::alloc::MapLarge = prepfs_base::alloc::MapLarge;

#[derive(Parser)]
#[command(name = "prepfs", version = env!("PREPFS_VERSION"), about = "A FUSE filesystem serving decoded and augmented training samples")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mount a dataset: `prepfs mount SOURCE MOUNTPOINT [--config FILE]` (or the older
    /// `prepfs mount CONFIG --source DIR --mountpoint DIR`). Runs in the foreground (Ctrl-C,
    /// SIGTERM, SIGHUP or `prepfs unmount MOUNTPOINT` drain and unmount; `fusermount3 -u
    /// MOUNTPOINT` unmounts at once) unless --background.
    Mount(Box<MountArgs>),
    /// Stop a mount as SIGTERM does: its daemon drains (serves until its readers stop, at most
    /// its --drain-max) and unmounts; waits until the mount and its daemon are gone.
    Unmount {
        /// The mountpoint of a prepfs mount.
        mountpoint: PathBuf,
        /// Stop at once, without the drain (as a second signal does: open files get errors).
        #[arg(long)]
        now: bool,
    },
    /// Print the live figures of a mounted prepfs: a readable summary, or the raw JSON.
    Stats {
        /// The mountpoint, or any path inside the mount (default: the current directory).
        #[arg(default_value = ".")]
        path: PathBuf,
        /// Print `.prepfs/stats.json` as it is (every figure, JSON).
        #[arg(long)]
        json: bool,
        /// Refresh every SECS seconds (default 2) until Ctrl-C, with per-second rates.
        #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
        watch: Option<f64>,
    },
    /// Hand a live mount to a new binary with no failed call (docs/restarts.md): the mount's
    /// supervisor asks the old server to stop taking requests and finish those it took, then
    /// starts BIN (default: this binary), which takes the connection over and resumes every
    /// job's epoch. A binary that cannot read the handed-over state is refused, and the old
    /// server serves on.
    Upgrade {
        /// The mountpoint of a prepfs mount.
        mountpoint: PathBuf,
        /// The new binary (an absolute path, or one relative to here).
        #[arg(long = "bin", value_name = "PATH")]
        binary: Option<PathBuf>,
    },
    /// A job's state: `prepfs job reset MOUNTPOINT NAME` ends it as `rmdir MOUNTPOINT/jobs/NAME`
    /// does (its next reader begins epoch 1), also on a read-only mount (docs/jobs.md).
    Job {
        #[command(subcommand)]
        action: JobAction,
    },
    /// Lend this machine's CPUs to the mounts sharing a remote tier: take work items from the
    /// tier's queue, make each with the mount's code, send it back (docs/workers.md). Runs until
    /// SIGTERM or Ctrl-C, which let the items in hand finish.
    Worker {
        /// The mounts' configuration (the same source, augment, output, recipes, seed and
        /// `cache.remote` with its secret_file).
        #[arg(long, short = 'c', value_name = "FILE")]
        config: PathBuf,
        /// The dataset directory (overrides the config's `source`).
        #[arg(long, value_name = "DIR")]
        source: Option<PathBuf>,
        /// This worker's name in the queue (default HOSTNAME-PID): 1 to 64 of ASCII letters,
        /// digits, `-`, `_`, `.`.
        #[arg(long)]
        name: Option<String>,
        /// Items made at once: one per core lent (default 1).
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Also answer `GET /metrics` (Prometheus's text format) on HOST:PORT.
        #[arg(long, value_name = "HOST:PORT")]
        metrics_addr: Option<String>,
        /// error, warn, info (the default), debug or trace, or a tracing filter.
        #[arg(long, value_name = "LEVEL")]
        log_level: Option<String>,
        /// Append the log to this file (created 0600 if missing; never through a link).
        #[arg(long, value_name = "PATH")]
        log_file: Option<PathBuf>,
    },
    /// The best cache split and its predicted samples/s (one JSON object).
    Plan {
        /// Model parameters (YAML, the paper's symbols; see mount-configs/plan-example.yaml).
        #[arg(long)]
        params: PathBuf,
        /// `prepfs` (the default: times add up, refills cost, memory flows on) or `seneca`
        /// (the paper's Eqs. 1-9 exactly).
        #[arg(long, default_value = "prepfs")]
        model: prepfs_planner::Model,
        /// Also evaluate this split, E-D-A percent.
        #[arg(long)]
        split: Option<String>,
        /// Epochs the run reads: the prepfs model's per-epoch predictions and first-touch
        /// policy (`run`) are for a run of this many.
        #[arg(long, default_value_t = prepfs_core::config::DEFAULT_EPOCHS)]
        epochs: u64,
        /// Samples/s of a full decode and an augment on all cores (the run model's `t_full`;
        /// default: the parameters' t_da, a full decode costing what a region decode does).
        #[arg(long)]
        t_full: Option<f64>,
        #[command(flatten)]
        placement: prepfs::plan_placement::PlacementArgs,
    },
    /// Validate a configuration and print it as prepfs will use it (the effective YAML a mount
    /// serves as .prepfs/config.yaml). Nothing is made: a missing cache.disk.path is accepted,
    /// as the mount would create it.
    Check {
        /// The mount configuration (YAML; see mount-configs/).
        config: PathBuf,
        /// The dataset directory, in place of the config's `source` (as `prepfs mount --source`);
        /// it must exist and be readable.
        #[arg(long, value_name = "DIR")]
        source: Option<PathBuf>,
        /// The mountpoint, in place of the config's `mountpoint` (as `prepfs mount
        /// --mountpoint`); the checks against it (the disk cache not inside it) use this one.
        #[arg(long, value_name = "DIR")]
        mountpoint: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum JobAction {
    /// End the job's state (its epoch, what it was served): its next reader begins epoch 1.
    Reset {
        /// The mountpoint, or any path inside the mount.
        mountpoint: PathBuf,
        /// The job's name (as under `jobs/`).
        name: String,
    },
}

#[derive(clap::Args, Debug)]
struct MountArgs {
    /// `SOURCE MOUNTPOINT`: the dataset directory (or a WebDataset shard pattern, quoted:
    /// '/data/train-{000000..000099}.tar', or an object store: s3://BUCKET/PREFIX) and where to
    /// mount it. A single path that is a file
    /// is the older form's CONFIG.
    #[arg(value_name = "SOURCE MOUNTPOINT | CONFIG", num_args = 0..=2)]
    paths: Vec<PathBuf>,
    /// The mount configuration (YAML; see mount-configs/). Without one, the shipped defaults
    /// (cache on).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,
    /// The dataset directory (overrides the config's `source`).
    #[arg(long, value_name = "DIR")]
    source: Option<PathBuf>,
    /// Where to mount (overrides the config's `mountpoint`).
    #[arg(long, value_name = "DIR")]
    mountpoint: Option<PathBuf>,
    /// Seed of every random draw (overrides `seed`).
    #[arg(long)]
    seed: Option<u64>,
    /// error, warn, info (the default), debug or trace, or a tracing filter such as
    /// `prepfs=debug,fuser=warn`. Wins over PREPFS_LOG.
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Append the log to this file (created 0600 if missing; never through a link) instead of writing it to stderr.
    #[arg(long, value_name = "PATH")]
    log_file: Option<PathBuf>,
    /// Create a missing mountpoint (removed again at unmount if still empty).
    #[arg(long)]
    create_mountpoint: bool,
    /// Mount over a directory that has entries (they are hidden while mounted).
    #[arg(long)]
    allow_non_empty: bool,
    /// Return once the mount serves, leaving the daemon running in its own session (unmount
    /// with `fusermount3 -u MOUNTPOINT` or `umount`). Logs go to --log-file, else nowhere (to
    /// the journal under systemd).
    #[arg(long, short = 'b')]
    background: bool,
    /// Stay in the foreground (the default; overrides a helper call's backgrounding).
    #[arg(long, short = 'f', conflicts_with = "background")]
    foreground: bool,
    /// Let other users use the mount (FUSE allow_other; same as `allow_other: true`).
    #[arg(long)]
    allow_other: bool,
    /// Also answer `GET /metrics` (Prometheus's text format, as `.prepfs/metrics`) on HOST:PORT
    /// while mounted, e.g. `127.0.0.1:9101`.
    #[arg(long, value_name = "HOST:PORT")]
    metrics_addr: Option<String>,
    /// Mount read-only at the kernel (`-o ro`): `rmdir jobs/NAME` is refused too (a job still
    /// starts at the first use inside its directory, and retires when idle).
    #[arg(long)]
    read_only: bool,
    /// Serve every read from the daemon, never through kernel passthrough (same as
    /// `passthrough: false`).
    #[arg(long)]
    no_passthrough: bool,
    /// Serve in this process, with no supervisor (`-o nosupervise`): a crash of the server
    /// then ends the mount (by default the `prepfs mount` process holds the connection and
    /// starts the server again: docs/restarts.md).
    #[arg(long)]
    no_supervise: bool,
    /// Show every file and directory as owned by this uid (as mount-s3 and gcsfuse do; same as
    /// `uid:`). What the source's own owners and modes deny a user stays denied.
    #[arg(long, value_name = "UID", value_parser = parse_id)]
    uid: Option<u32>,
    /// Show every file and directory with this group (same as `gid:`).
    #[arg(long, value_name = "GID", value_parser = parse_id)]
    gid: Option<u32>,
    /// Which views hide the samples known bad from listings and never serve one: `jobs` (the
    /// default: a job's open of a bad sample is served another of its directory), `all` (the
    /// top-level views too), `none` (same as `bad_samples.hide`).
    #[arg(long, value_name = "WHERE")]
    hide_bad_samples: Option<HideBad>,
    /// When samples are checked: `first-touch` (the default: at their first open), `headers`
    /// (each header at mount) or `scan` (each sample fully decoded at mount) (same as
    /// `bad_samples.validate`).
    #[arg(long, value_name = "MODE")]
    validate: Option<Validate>,
    /// On SIGTERM, SIGINT, SIGHUP or `prepfs unmount`, keep serving until no open, lookup or
    /// read has come for SECONDS and no file is open, then unmount (default 3; 0: unmount as
    /// soon as no file is open; same as `stop: {drain: ...}`). A second signal stops at once.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    drain: Option<f64>,
    /// The longest a drain lasts, from the signal (default 60): then the mount stops as a
    /// second signal stops it, so a scheduler's SIGTERM ends it in bounded time (same as
    /// `stop: {drain_max: ...}`).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    drain_max: Option<f64>,
    /// Mount options, comma-separated, as mount(8) and /etc/fstab give them: config=FILE,
    /// allow_other, ro, rw, nonempty, nopassthrough, x-mount.mkdir, log_level=LEVEL,
    /// log_file=PATH, seed=N, uid=N, gid=N, hide_bad=WHERE, validate=MODE, drain=SECONDS,
    /// drain_max=SECONDS;
    /// mount(8)'s generic options (defaults, nofail, _netdev, noauto, x-*, ...) are ignored.
    #[arg(short = 'o', value_name = "OPTIONS")]
    options: Vec<String>,
}

/// What `-o` said.
#[derive(Debug, Default, PartialEq)]
struct MountOptions {
    config: Option<PathBuf>,
    allow_other: bool,
    read_only: Option<bool>,
    allow_non_empty: bool,
    create_mountpoint: bool,
    no_passthrough: bool,
    no_supervise: bool,
    log_level: Option<String>,
    log_file: Option<PathBuf>,
    seed: Option<u64>,
    hide_bad: Option<HideBad>,
    validate: Option<Validate>,
    uid: Option<u32>,
    gid: Option<u32>,
    drain: Option<f64>,
    drain_max: Option<f64>,
}

/// mount(8)'s own options and FUSE's that prepfs always sets: accepted and ignored.
const IGNORED_OPTIONS: &[&str] = &[
    "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group", "nofail", "_netdev",
    "dev", "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime",
    "norelatime", "strictatime", "nostrictatime", "diratime", "nodiratime", "lazytime",
    "nolazytime", "async", "sync", "silent", "loud", "default_permissions",
];

/// The value of `key=value`, which must not be empty.
fn need<'a>(key: &str, value: Option<&'a str>) -> Result<&'a str, String> {
    value.filter(|v| !v.is_empty()).ok_or_else(|| format!("mount option `{key}` needs a value (`{key}=...`)"))
}

fn parse_mount_options(lists: &[String]) -> Result<MountOptions, String> {
    let mut o = MountOptions::default();
    for opt in lists.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|s| !s.is_empty()) {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        match key {
            "config" => o.config = Some(need(key, value)?.into()),
            "allow_other" => o.allow_other = true,
            "ro" => o.read_only = Some(true),
            "rw" => o.read_only = Some(false),
            "nonempty" | "allow_non_empty" => o.allow_non_empty = true,
            "nopassthrough" => o.no_passthrough = true,
            "nosupervise" => o.no_supervise = true,
            "x-mount.mkdir" | "create_mountpoint" => o.create_mountpoint = true,
            "log_level" => o.log_level = Some(need(key, value)?.to_string()),
            "log_file" => o.log_file = Some(need(key, value)?.into()),
            "uid" => o.uid = Some(parse_id(need(key, value)?).map_err(|e| format!("mount option `uid={}`: {e}", value.unwrap_or("")))?),
            "gid" => o.gid = Some(parse_id(need(key, value)?).map_err(|e| format!("mount option `gid={}`: {e}", value.unwrap_or("")))?),
            "hide_bad" => o.hide_bad = Some(need(key, value)?.parse().map_err(|e| format!("mount option `hide_bad`: {e}"))?),
            "validate" => o.validate = Some(need(key, value)?.parse().map_err(|e| format!("mount option `validate`: {e}"))?),
            "drain" => o.drain = Some(parse_seconds(need(key, value)?).map_err(|e| format!("mount option `drain`: {e}"))?),
            "drain_max" => o.drain_max = Some(parse_seconds(need(key, value)?).map_err(|e| format!("mount option `drain_max`: {e}"))?),
            "seed" => o.seed = Some(need(key, value)?.parse().map_err(|_| format!("mount option `seed={}`: not a number", value.unwrap_or("")))?),
            // mount(8) and fuse pass these; the values say nothing prepfs uses.
            "fsname" | "subtype" | "comment" | "context" | "fscontext" | "defcontext" | "rootcontext" => {}
            _ if IGNORED_OPTIONS.contains(&key) || key.starts_with("x-") => {}
            _ => {
                return Err(format!(
                    "unknown mount option `{opt}` (prepfs takes config=FILE, allow_other, ro, rw, nonempty, nopassthrough, x-mount.mkdir, log_level=LEVEL, log_file=PATH, seed=N, uid=N, gid=N, hide_bad=WHERE, validate=MODE, drain=SECONDS, drain_max=SECONDS)"
                ))
            }
        }
    }
    Ok(o)
}

/// Seconds, 0 or more (fractions too), at most a day.
fn parse_seconds(text: &str) -> Result<f64, String> {
    match text.trim().trim_end_matches('s').parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.0..=86_400.0).contains(&secs) => Ok(secs),
        Ok(_) => Err(format!("{text}: give seconds from 0 to 86400")),
        Err(_) => Err(format!("{text}: not a number of seconds")),
    }
}

/// A uid or gid: a whole number, 0 to [`prepfs_core::config::MAX_ID`] (2^31 - 1; see there why).
fn parse_id(text: &str) -> Result<u32, String> {
    let id: u64 = text.trim().parse().map_err(|_| "not a number".to_string())?;
    u32::try_from(id).ok().filter(|&id| id <= prepfs_core::config::MAX_ID).ok_or_else(|| {
        format!("{id} is past {} (ids of 2^31 and up are refused: many tools hold them signed, and 4294967295 is (uid_t)-1, \"no change\")", prepfs_core::config::MAX_ID)
    })
}

/// The subcommands, and the flags clap answers itself.
const SUBCOMMANDS: &[&str] = &["mount", "unmount", "upgrade", "stats", "plan", "check", "worker", "job", "help"];

/// Rewrites a `mount.fuse`-style call, `prepfs SOURCE MOUNTPOINT [-o OPTIONS] [-f] [-n] [-s]
/// [-v] [-t TYPE]`, into `prepfs mount SOURCE MOUNTPOINT --background -o OPTIONS` (`-f`:
/// foreground, as libfuse's programs take it; `-n`, `-s`, `-v` and `-t TYPE`, which mount(8)
/// may pass, are ignored). Any other command line is returned as it is.
fn helper_call(args: Vec<OsString>) -> Vec<OsString> {
    let first = args.get(1).and_then(|a| a.to_str()).unwrap_or("-");
    if args.len() < 3 || first.starts_with('-') || SUBCOMMANDS.contains(&first) {
        return args;
    }
    let mut out: Vec<OsString> = vec![args[0].clone(), "mount".into()];
    let mut foreground = false;
    let mut rest = args.into_iter().skip(1);
    while let Some(arg) = rest.next() {
        match arg.to_str() {
            Some("-f") => foreground = true,
            Some("-n" | "-s" | "-v") => {}
            Some("-t") => {
                rest.next();
            }
            Some(t) if t.starts_with("-t") => {}
            _ => out.push(arg),
        }
    }
    if !foreground {
        out.push("--background".into());
    }
    out
}

fn main() -> ExitCode {
    prepfs_base::alloc::tune_malloc();
    if std::env::args_os().nth(1).is_some_and(|a| a == "__takeover-formats") {
        prepfs::supervisor::print_formats();
        return ExitCode::SUCCESS;
    }
    let command = Cli::parse_from(helper_call(std::env::args_os().collect())).command;
    if !matches!(command, Command::Mount(_) | Command::Worker { .. }) {
        if let Err(e) = init_log(None, None) {
            return usage(e);
        }
    }
    match command {
        Command::Mount(args) => mount(*args),
        Command::Unmount { mountpoint, now } => match prepfs::unmount::unmount(&mountpoint, now) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(e),
        },
        Command::Stats { path, json, watch } => stats(&path, json, watch),
        Command::Upgrade { mountpoint, binary } => match prepfs::supervisor::upgrade(&mountpoint, binary.as_deref()) {
            Ok(said) => {
                println!("prepfs: {said}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("upgrade refused: {e}")),
        },
        Command::Job { action: JobAction::Reset { mountpoint, name } } => match prepfs::job::reset(&mountpoint, &name) {
            Ok(()) => {
                println!("job {} reset: its next reader begins epoch 1", prepfs_base::escape::escaped(&name));
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        },
        Command::Worker { config, source, name, threads, metrics_addr, log_level, log_file } => {
            if let Err(e) = init_log(log_level.as_deref(), log_file.as_deref()) {
                return usage(e);
            }
            let args = prepfs::worker::WorkerArgs { config, source, name, threads, metrics_addr };
            let ready = |name: &str| prepfs_base::log::say(&format!("prepfs worker: {name} serving (SIGTERM or Ctrl-C to stop)"));
            match prepfs::worker::run(&args, ready) {
                Ok(summary) => {
                    prepfs_base::log::say(&format!("prepfs worker: stopped: {summary}"));
                    ExitCode::SUCCESS
                }
                Err(prepfs::worker::WorkerRunError::Worker(e)) if matches!(e, prepfs_core::worker::WorkerError::NoRemote | prepfs_core::worker::WorkerError::Name(_)) => usage(e),
                Err(e) => fail(e),
            }
        }
        Command::Plan { params, split, model, epochs, t_full, placement } => {
            let params = match prepfs_planner::load_params(&params) {
                Ok(p) => p,
                Err(e) => return fail(e),
            };
            let split = match split.map(|s| s.parse::<prepfs_planner::Split>()).transpose() {
                Ok(s) => s,
                Err(e) => return fail(e),
            };
            let mut out = model.plan_json(&params, split);
            if let (prepfs_planner::Model::Prepfs, Some(map)) = (model, out.as_object_mut()) {
                map.insert("run".into(), prepfs_planner::run::plan_json(&params, split, epochs, t_full.unwrap_or(params.t_da)));
            }
            match (placement.plan_json(&params), out.as_object_mut()) {
                (Ok(Some(p)), Some(map)) => {
                    map.insert("placement".into(), p);
                }
                (Err(e), _) => return usage(e),
                _ => {}
            }
            println!("{out}");
            ExitCode::SUCCESS
        }
        Command::Check { config, source, mountpoint } => {
            match Config::check(&config, &Overrides { source, mountpoint, seed: None }) {
                Ok(c) => {
                    // On stderr: stdout stays a config file.
                    for warning in c.memory_warnings() {
                        prepfs_base::log::say(&format!("prepfs: warning: {warning}"));
                    }
                    print!("{}", c.to_yaml());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
    }
}

/// `prepfs stats`: finds the mount `path` is in, prints its figures once or, with `watch`,
/// every that many seconds (clearing a terminal between readings) until interrupted.
fn stats(path: &Path, json: bool, watch: Option<f64>) -> ExitCode {
    use prepfs::summary::{find_mount, summary};
    let root = match find_mount(path) {
        Ok(root) => root,
        Err(e) => return fail(e),
    };
    let file = root.join(".prepfs/stats.json");
    let period = match watch {
        Some(secs) if !(secs.is_finite() && secs >= 0.1) => return usage(format!("--watch {secs}: give seconds, 0.1 or more")),
        Some(secs) => Some(std::time::Duration::from_secs_f64(secs)),
        None => None,
    };
    let clear = period.is_some() && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut previous: Option<serde_json::Value> = None;
    loop {
        let text = match std::fs::read_to_string(&file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return fail(format!(
                    "{}: {e}: the mount's figures are its owner's (they name the source's paths); \
                     its owner may share them with every user by mounting with `control_public: true`",
                    prepfs_base::escape::escaped(&file)
                ))
            }
            Err(e) => return fail(format!("{}: {e} (has the mount stopped?)", prepfs_base::escape::escaped(&file))),
        };
        let out = if json {
            text
        } else {
            let doc: serde_json::Value = match serde_json::from_str(&text) {
                Ok(doc) => doc,
                Err(e) => return fail(format!("{}: not JSON: {e}", prepfs_base::escape::escaped(&file))),
            };
            let gap = if period.is_some() && !clear { "\n" } else { "" };
            let out = format!("{}{gap}", summary(&doc, previous.as_ref()));
            previous = Some(doc);
            format!("mount        {}\n{out}", prepfs_base::escape::escaped(&root))
        };
        let mut stdout = std::io::stdout().lock();
        let written = if clear { write!(stdout, "\x1b[H\x1b[2J{out}") } else { write!(stdout, "{out}") };
        // A closed pipe (`| head`) ends the command quietly.
        if written.and_then(|()| stdout.flush()).is_err() {
            return ExitCode::SUCCESS;
        }
        drop(stdout);
        match period {
            Some(period) => std::thread::sleep(period),
            None => return ExitCode::SUCCESS,
        }
    }
}

/// Sets up the log: `level` (--log-level) or PREPFS_LOG or `info`, to `file` (appended) or
/// stderr. A level or filter that does not parse is refused (exit status 2).
fn init_log(level: Option<&str>, file: Option<&Path>) -> Result<(), String> {
    let filter = match level {
        Some(text) => prepfs_base::log::parse_filter(text).map_err(|e| format!("--log-level {text}: {e}"))?,
        None => match std::env::var("PREPFS_LOG") {
            Ok(text) if !text.trim().is_empty() => {
                prepfs_base::log::parse_filter(&text).map_err(|e| format!("PREPFS_LOG={text}: {e}"))?
            }
            Ok(_) | Err(std::env::VarError::NotPresent) => prepfs_base::log::parse_filter("info")?,
            Err(std::env::VarError::NotUnicode(_)) => return Err("PREPFS_LOG is not UTF-8".into()),
        },
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // A log line that cannot be written (the terminal or a `| head` went away) is dropped:
        // reporting it would `eprintln!`, which panics on a closed stderr.
        .log_internal_errors(false);
    match file {
        Some(path) => {
            let file = prepfs_base::log::open_log_file(path).map_err(|e| format!("--log-file {}: {e}", prepfs_base::escape::escaped(&path)))?;
            builder.with_ansi(false).with_writer(std::sync::Arc::new(file)).init();
        }
        None => builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).with_writer(std::io::stderr).init(),
    }
    Ok(())
}

fn mount(args: MountArgs) -> ExitCode {
    let options = match parse_mount_options(&args.options) {
        Ok(o) => o,
        Err(e) => return usage(e),
    };
    let log_level = args.log_level.as_deref().or(options.log_level.as_deref());
    if let Err(e) = init_log(log_level, args.log_file.as_deref().or(options.log_file.as_deref())) {
        return usage(e);
    }
    let logs_to_file = args.log_file.is_some() || options.log_file.is_some();
    let plan = match MountPlan::resolve(&args, &options) {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let overrides = Overrides { source: plan.source, mountpoint: plan.mountpoint, seed: args.seed.or(options.seed) };
    let loaded = match &plan.config {
        Some(path) => Config::load(path, &overrides),
        // No config file: the shipped defaults, as an empty file would give them.
        None => Config::parse("", &overrides),
    };
    let mut config = match loaded {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    config.access.allow_other |= args.allow_other || options.allow_other;
    config.passthrough &= !(args.no_passthrough || options.no_passthrough);
    if let Some(uid) = args.uid.or(options.uid) {
        config.access.uid = Some(uid);
    }
    if let Some(gid) = args.gid.or(options.gid) {
        config.access.gid = Some(gid);
    }
    if let Some(hide) = args.hide_bad_samples.or(options.hide_bad) {
        config.bad_samples.hide = hide;
    }
    if let Some(validate) = args.validate.or(options.validate) {
        config.bad_samples.validate = validate;
    }
    let lifecycle = Lifecycle {
        // The older form has always created a missing mountpoint (and left it at unmount).
        create_mountpoint: args.create_mountpoint || options.create_mountpoint || plan.older_form,
        keep_created_mountpoint: plan.older_form && !(args.create_mountpoint || options.create_mountpoint),
        allow_non_empty: args.allow_non_empty || options.allow_non_empty,
        read_only: args.read_only || options.read_only.unwrap_or(false),
        metrics_addr: args.metrics_addr.clone(),
        on_ready: None,
        drain: drain_config(config.stop, args.drain.or(options.drain), args.drain_max.or(options.drain_max)),
    };
    // A server a supervisor started mounts in the foreground, whatever its command line says.
    let supervise = !(args.no_supervise || options.no_supervise || prepfs::supervisor::started_by_supervisor());
    if args.background && !args.foreground && !prepfs::supervisor::started_by_supervisor() {
        return background(config, lifecycle, logs_to_file, supervise);
    }
    finish(run_mount(config, lifecycle, supervise, false))
}

/// Mounts: under a supervisor that holds the connection and starts the server (this binary,
/// with this command line) again when it dies, or in this process.
fn run_mount(config: Config, mut lifecycle: Lifecycle, supervise: bool, detach_stdio: bool) -> Result<(), MountError> {
    if !supervise {
        return prepfs::mount::run(config, lifecycle);
    }
    let mountpoint = &config.mountpoint;
    // The mountpoint may not exist yet (--create-mountpoint): its parent's canonical path then.
    let canonical_mountpoint = mountpoint.canonicalize().unwrap_or_else(|_| match (mountpoint.parent().and_then(|p| p.canonicalize().ok()), mountpoint.file_name()) {
        (Some(parent), Some(name)) => parent.join(name),
        _ => mountpoint.clone(),
    });
    prepfs::supervisor::run(prepfs::supervisor::Supervision {
        args: std::env::args_os().skip(1).collect(),
        canonical_mountpoint,
        on_ready: lifecycle.on_ready.take(),
        allow_other: config.access.allow_other,
        detach_stdio,
    })
}

/// The drain's settings: the config's (`stop:`), less what the command line gives.
fn drain_config(config: prepfs_core::drain::DrainConfig, quiet: Option<f64>, max: Option<f64>) -> prepfs_core::drain::DrainConfig {
    prepfs_core::drain::DrainConfig {
        quiet: quiet.map_or(config.quiet, std::time::Duration::from_secs_f64),
        max: max.map_or(config.max, std::time::Duration::from_secs_f64),
    }
}

fn finish(ran: Result<(), MountError>) -> ExitCode {
    match ran {
        Ok(()) | Err(MountError::Stopped) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// Which config, source and mountpoint the command line names.
#[derive(Debug, PartialEq)]
struct MountPlan {
    config: Option<PathBuf>,
    source: Option<PathBuf>,
    mountpoint: Option<PathBuf>,
    /// `prepfs mount CONFIG ...`: the config file as the first positional.
    older_form: bool,
}

impl MountPlan {
    fn resolve(args: &MountArgs, options: &MountOptions) -> Result<MountPlan, String> {
        let flag_config = match (&args.config, &options.config) {
            (Some(_), Some(_)) => return Err("give the config once: --config FILE or -o config=FILE".into()),
            (c, o) => c.clone().or(o.clone()),
        };
        let conflict = |what: &str| Err(format!("{what} given twice: as a positional argument and as --{what}"));
        let mut plan = MountPlan { config: flag_config, source: args.source.clone(), mountpoint: args.mountpoint.clone(), older_form: false };
        match args.paths.as_slice() {
            [] if plan.config.is_none() && plan.source.is_none() => {
                return Err("nothing to mount: give SOURCE MOUNTPOINT (a dataset directory and where to mount it), or --config FILE".into())
            }
            [] => {}
            [one] if !one.exists() => {
                return Err(format!(
                    "{}: no such file or directory (expected SOURCE MOUNTPOINT, a dataset directory and where to mount it, or a config file)",
                    prepfs_base::escape::escaped(&one)
                ))
            }
            [one] if one.is_dir() => {
                if plan.source.is_some() {
                    return conflict("source");
                }
                plan.source = Some(one.clone());
            }
            [config] => {
                if plan.config.is_some() {
                    return Err(format!(
                        "{} is not a directory, so it would be the config file, but --config names one too",
                        prepfs_base::escape::escaped(&config)
                    ));
                }
                plan.config = Some(config.clone());
                plan.older_form = true;
            }
            [source, mountpoint] => {
                let shards = prepfs_source::shards::is_shard_pattern(&source.to_string_lossy())
                    || prepfs_core::config::is_object_store_url(&source.to_string_lossy());
                if source.exists() && !source.is_dir() && !shards {
                    return Err(format!(
                        "SOURCE {} is not a directory or a shard pattern (to mount with a config file: `prepfs mount SOURCE MOUNTPOINT --config FILE`)",
                        prepfs_base::escape::escaped(&source)
                    ));
                }
                if plan.source.is_some() {
                    return conflict("source");
                }
                if plan.mountpoint.is_some() {
                    return conflict("mountpoint");
                }
                plan.source = Some(source.clone());
                plan.mountpoint = Some(mountpoint.clone());
            }
            _ => return Err("at most two paths: SOURCE MOUNTPOINT".into()),
        }
        // The daemon's paths are absolute: what it says and what `mount_at` finds stay right.
        plan.mountpoint = plan.mountpoint.map(|m| std::path::absolute(&m).unwrap_or(m));
        Ok(plan)
    }
}

/// The number of threads this process runs (Linux), if it can tell.
fn thread_count() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok())
}

/// `--background`: forks before any thread starts; the child starts its own session and
/// mounts, and says on a pipe `R<line>` once the mount serves or `E<error>` if it cannot
/// mount; the parent waits for that word, prints it and exits 0 (ready) or 1.
fn background(config: Config, mut lifecycle: Lifecycle, logs_to_file: bool, supervise: bool) -> ExitCode {
    if thread_count().is_some_and(|n| n > 1) {
        return fail("cannot go to the background: threads are already running");
    }
    // Close-on-exec: the helpers prepfs runs (fusermount3) must not hold the pipe open.
    let (read_end, write_end) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot go to the background: pipe: {e}")),
    };
    // SAFETY: this process runs one thread (checked above), so the child may do anything.
    match unsafe { nix::unistd::fork() } {
        Err(e) => fail(format!("cannot go to the background: fork: {e}")),
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(write_end);
            let mut said = String::new();
            let _ = std::fs::File::from(read_end).read_to_string(&mut said);
            match said.split_at_checked(1) {
                Some(("R", line)) => {
                    println!("prepfs: {line} (in the background, pid {child}; `prepfs unmount` the mountpoint to unmount)");
                    if !logs_to_file && std::env::var_os("JOURNAL_STREAM").is_none() {
                        prepfs_base::log::say("prepfs: its log is discarded: pass --log-file FILE (-o log_file=FILE) to keep it");
                    }
                    ExitCode::SUCCESS
                }
                Some(("E", error)) => fail(error),
                _ => {
                    let status = nix::sys::wait::waitpid(child, None);
                    fail(format!("the mount daemon ended before the mount was ready ({status:?})"))
                }
            }
        }
        Ok(nix::unistd::ForkResult::Child) => {
            drop(read_end);
            let _ = nix::unistd::setsid();
            close_inherited_fds();
            let pipe = std::rc::Rc::new(std::cell::RefCell::new(Some(std::fs::File::from(write_end))));
            let on_ready = std::rc::Rc::clone(&pipe);
            lifecycle.on_ready = Some(Box::new(move |ready: &Ready<'_>| {
                // Nothing of the caller's terminal or pipes stays open in the daemon (a caller
                // reading our output to its end would wait for the unmount otherwise); under
                // systemd stderr is the journal, kept.
                detach_stdio(std::env::var_os("JOURNAL_STREAM").is_some());
                if let Some(mut pipe) = on_ready.borrow_mut().take() {
                    let _ = write!(
                        pipe,
                        "Rserving {} samples of {} at {}",
                        ready.samples,
                        prepfs_base::escape::escaped(&ready.source),
                        prepfs_base::escape::escaped(&ready.mountpoint)
                    );
                }
            }));
            let ran = run_mount(config, lifecycle, supervise, true);
            if let Some(mut pipe) = pipe.borrow_mut().take() {
                let _ = write!(pipe, "E{}", ran.as_ref().err().map_or("stopped before the mount was ready".to_string(), |e| e.to_string()));
            }
            finish(ran)
        }
    }
}

/// Closes the descriptors this process inherited beyond stdin, stdout and stderr (those not
/// close-on-exec: every one prepfs opens is), so that the daemon holds none of its caller's
/// pipes or files open.
fn close_inherited_fds() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).filter(|&fd| fd > 2).collect();
    for fd in fds {
        // SAFETY: F_GETFD and close on descriptors of this process; the one the listing used
        // is closed already (and close-on-exec), those Rust opened are close-on-exec and kept.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC == 0 {
                libc::close(fd);
            }
        }
    }
}

/// Points stdin and stdout (and stderr unless `keep_stderr`) at /dev/null.
fn detach_stdio(keep_stderr: bool) {
    use std::os::fd::AsRawFd;
    let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") else { return };
    for fd in [0, 1, 2] {
        if fd == 2 && keep_stderr {
            continue;
        }
        // SAFETY: dup2 onto the standard descriptors, which stay open (now /dev/null).
        unsafe { libc::dup2(null.as_raw_fd(), fd) };
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    prepfs_base::log::say(&format!("prepfs: {e}"));
    ExitCode::FAILURE
}

/// A command line or environment refused before anything starts: exit status 2, as clap's
/// own usage errors.
fn usage(e: impl std::fmt::Display) -> ExitCode {
    prepfs_base::log::say(&format!("prepfs: {e}"));
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_mount_fuse_style_call_becomes_a_background_mount() {
        assert_eq!(
            helper_call(os(&["prepfs", "/data", "/mnt/in", "-o", "rw,config=/etc/p.yaml", "-n"])),
            os(&["prepfs", "mount", "/data", "/mnt/in", "-o", "rw,config=/etc/p.yaml", "--background"])
        );
        assert_eq!(helper_call(os(&["prepfs", "/d", "/m", "-f"])), os(&["prepfs", "mount", "/d", "/m"]));
        let plain = os(&["prepfs", "mount", "/d", "/m"]);
        assert_eq!(helper_call(plain.clone()), plain);
        assert_eq!(helper_call(os(&["prepfs", "--help"])), os(&["prepfs", "--help"]));
    }

    #[test]
    fn mount_options_parse_and_unknown_ones_are_refused() {
        let o = parse_mount_options(&["rw,config=/etc/p.yaml,allow_other,nofail,_netdev,x-systemd.automount".into(), "ro,nonempty".into()])
            .expect("parse");
        assert_eq!(o.config, Some(PathBuf::from("/etc/p.yaml")));
        assert!(o.allow_other && o.allow_non_empty);
        assert_eq!(o.read_only, Some(true));
        assert!(parse_mount_options(&["bogus".into()]).expect_err("unknown").contains("bogus"));
        assert!(parse_mount_options(&["config=".into()]).is_err());
        assert!(parse_mount_options(&["seed=x".into()]).is_err());
        let o = parse_mount_options(&["uid=1000,gid=100,hide_bad=all,validate=scan".into()]).expect("parse");
        assert_eq!((o.uid, o.gid), (Some(1000), Some(100)));
        assert_eq!((o.hide_bad, o.validate), (Some(HideBad::All), Some(Validate::Scan)));
        assert!(parse_mount_options(&["uid=me".into()]).is_err());
        // 2^31 - 1 is the largest id; (uid_t)-1 and everything from 2^31 up are refused.
        assert_eq!(parse_mount_options(&["uid=2147483647,gid=0".into()]).expect("parse").uid, Some(2147483647));
        for opt in ["uid=4294967295", "gid=2147483648", "uid=99999999999"] {
            assert!(parse_mount_options(&[opt.into()]).expect_err(opt).contains("2147483647"), "{opt}");
        }
        assert!(parse_mount_options(&["validate=sometimes".into()]).expect_err("bad mode").contains("first-touch"));
        let o = parse_mount_options(&["drain=1.5,drain_max=30s".into()]).expect("parse");
        assert_eq!((o.drain, o.drain_max), (Some(1.5), Some(30.0)));
        assert!(parse_mount_options(&["drain=-1".into()]).is_err());
        assert!(parse_mount_options(&["drain_max=soon".into()]).is_err());
    }
}
