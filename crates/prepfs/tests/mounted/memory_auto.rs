//! Mounted tests of `cache.memory: auto` among several mounts on one machine: each mount
//! registers its cache memory machine-wide (here in a registry directory of the test's own,
//! `PREPFS_RUN_DIR`), and a mount set to `auto` takes its share given what the others hold.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{make_dataset, mount_command, write_config, Mounted};

const LIMIT: Duration = Duration::from_secs(120);

/// A mount of `source` with `memory: auto` (the default) under `tmp/name`, registering in `run`.
fn mount(tmp: &Path, name: &str, source: &Path, run: &Path) -> Mounted {
    let dir = tmp.join(name);
    std::fs::create_dir_all(&dir).expect("dir");
    let config = write_config(&dir, "seed: 1\nthreads: 2\n");
    let mountpoint = dir.join("mnt");
    let mut cmd = mount_command(&config, source, &mountpoint);
    cmd.env("PREPFS_RUN_DIR", run);
    Mounted::start_command(cmd, &mountpoint, &dir.join("prepfs.log"), LIMIT)
}

/// stats.json's `memory_auto` figures, checked against the cache's budget: (memory, machine
/// budget, other mounts, what they hold).
fn auto_of(mnt: &Mounted) -> (u64, u64, u64, u64) {
    let stats = mnt.stats();
    let auto = &stats["memory_auto"];
    let figure = |key: &str| auto[key].as_u64().unwrap_or_else(|| panic!("memory_auto.{key}: {stats}"));
    let memory = figure("memory");
    assert_eq!(stats["cache"]["memory"], memory, "the cache's budget is auto's: {stats}");
    assert_eq!(memory, (figure("machine_budget") - figure("others_hold")) / 2, "half of what the others leave: {stats}");
    (memory, figure("machine_budget"), figure("others"), figure("others_hold"))
}

fn entries(run: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(run).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

#[test]
fn a_second_auto_mount_counts_the_firsts_memory_and_a_later_one_alone_gets_the_whole_share() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let source = make_dataset(tmp.path(), 1, 3, false);
    let run = tmp.path().join("run");
    // A registered mount whose process is gone (killed before unmounting): not counted.
    let mut gone = std::process::Command::new("true").spawn().expect("spawn true");
    gone.wait().expect("reaped");
    std::fs::create_dir_all(&run).expect("run dir");
    let stale = format!("{{\"pid\":{},\"mountpoint\":\"/gone\",\"memory\":1000000000000}}", gone.id());
    std::fs::write(run.join(format!("{}.json", gone.id())), stale).expect("stale entry");

    let first = mount(tmp.path(), "first", &source, &run);
    let (first_memory, _, others, held) = auto_of(&first);
    assert_eq!((others, held), (0, 0), "alone: the gone mount's entry is not counted");
    assert!(first_memory > 0);
    assert_eq!(entries(&run).len(), 1, "the gone mount's entry was removed, the first's is there: {:?}", entries(&run));

    let second = mount(tmp.path(), "second", &source, &run);
    let (second_memory, budget, others, held) = auto_of(&second);
    assert_eq!((others, held), (1, first_memory), "the second counts the first's memory");
    assert!(first_memory + second_memory <= budget, "both within the machine budget");
    assert!(second.log().contains("cache memory auto"), "the decision is logged: {}", second.log());

    drop(first);
    drop(second);
    assert!(entries(&run).is_empty(), "each mount's entry goes at unmount: {:?}", entries(&run));
    let third = mount(tmp.path(), "third", &source, &run);
    let (third_memory, budget, others, held) = auto_of(&third);
    assert_eq!((others, held), (0, 0), "the others are gone");
    assert_eq!(third_memory, budget / 2, "alone again: the whole share");
}
