//! The `prepfs` command: `mount` a dataset, print a mount's `stats`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use prepfs::config::{Config, Overrides};

#[derive(Parser)]
#[command(name = "prepfs", version, about = "A FUSE filesystem serving decoded and augmented training samples")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Mount a dataset (foreground; Ctrl-C, SIGTERM or SIGHUP unmount).
    Mount {
        /// The mount configuration (YAML; see mount-configs/).
        config: PathBuf,
        /// The dataset directory (overrides `source`).
        #[arg(long)]
        source: Option<PathBuf>,
        /// Where to mount (overrides `mountpoint`).
        #[arg(long)]
        mountpoint: Option<PathBuf>,
        /// Seed of every random draw (overrides `seed`).
        #[arg(long)]
        seed: Option<u64>,
    },
    /// Print the live figures of a mounted prepfs.
    Stats {
        /// The mountpoint.
        mountpoint: PathBuf,
    },
    /// The best cache split and its predicted samples/s (one JSON object).
    Plan {
        /// Model parameters (YAML, the paper's symbols; see mount-configs/plan-example.yaml).
        #[arg(long)]
        params: PathBuf,
        /// `prepfs` (the default: times add up, refills cost, memory flows on) or `seneca`
        /// (the paper's Eqs. 1-9 exactly).
        #[arg(long, default_value = "prepfs")]
        model: prepfs::planner::Model,
        /// Also evaluate this split, E-D-A percent.
        #[arg(long)]
        split: Option<String>,
    },
    /// Validate a configuration and print it as prepfs will use it.
    Check {
        config: PathBuf,
        #[arg(long)]
        source: Option<PathBuf>,
        #[arg(long)]
        mountpoint: Option<PathBuf>,
    },
}

/// Keeps the daemon's resident memory close to what the cache charges: glibc's per-thread
/// arenas otherwise hold freed sample buffers (hundreds of KB each) and RSS creeps past the
/// budget. Buffers of 128 KiB and more (decoded pixels, augmented outputs) are mapped and
/// returned whole on free; at most two arenas; free heap tops above 1 MiB are trimmed.
fn bound_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes glibc's allocator; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1024 * 1024);
    }
}

fn main() -> ExitCode {
    bound_allocator();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PREPFS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // A log line that cannot be written (the terminal or a `| head` went away) is dropped:
        // reporting it would `eprintln!`, which panics on a closed stderr.
        .log_internal_errors(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match Cli::parse().command {
        Command::Mount { config, source, mountpoint, seed } => {
            let config = match Config::load(&config, &Overrides { source, mountpoint, seed }) {
                Ok(c) => c,
                Err(e) => return fail(e),
            };
            match prepfs::mount::run(config) {
                Ok(()) | Err(prepfs::mount::MountError::Stopped) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
        Command::Stats { mountpoint } => {
            let path = mountpoint.join(".prepfs/stats.json");
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(format!("{}: {e} (is prepfs mounted there?)", path.display())),
            }
        }
        Command::Plan { params, split, model } => {
            let params = match prepfs::planner::load_params(&params) {
                Ok(p) => p,
                Err(e) => return fail(e),
            };
            let split = match split.map(|s| s.parse::<prepfs::planner::Split>()).transpose() {
                Ok(s) => s,
                Err(e) => return fail(e),
            };
            println!("{}", model.plan_json(&params, split));
            ExitCode::SUCCESS
        }
        Command::Check { config, source, mountpoint } => {
            match Config::load(&config, &Overrides { source, mountpoint, seed: None }) {
                Ok(c) => {
                    print!("{}", c.to_yaml());
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    prepfs::log::say(&format!("prepfs: {e}"));
    ExitCode::FAILURE
}
