//! The epoch ledger read back ([`Jobs::attach_ledger`]): every job it keeps put back into a
//! fresh registry in its slot, with its generation (so its inode code), owner, epoch and the
//! samples it was served in that epoch, and its recipes' views the same; then the registry
//! records in the ledger from there on. What was found is a [`LedgerReport`], for the log.

use std::fs::File;
use std::io;

use prepfs_base::sync::Arc;
use prepfs_source::catalog::FileId;

use crate::ledger::{tag, EpochLedger, LedgerError, LedgerView, RegionHeader};
use crate::registry::Jobs;
use super::MAX_JOBS;

/// Views a slot has in the ledger: the job's own (0) and recipes 1 to 255.
const RECIPE_VIEWS: std::ops::RangeInclusive<u8> = 1..=u8::MAX;

/// What attaching an epoch ledger found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerReport {
    /// The file was empty and was made a ledger.
    pub fresh: bool,
    /// Jobs put back.
    pub jobs: usize,
    /// Their recipes' views put back.
    pub recipe_views: usize,
    /// Samples put back as served in their view's current epoch, over all views.
    pub samples: u64,
    /// Regions found that were no job's (torn, of a job retired mid-way, or refused by the
    /// registry): cleared, not used.
    pub dropped: usize,
    /// Bytes of the ledger that hold data (`st_blocks * 512`).
    pub bytes: u64,
    /// The seed the ledger was made with, where it is not the mount's: the jobs are put back
    /// all the same, but their listings are shuffled otherwise from now on.
    pub seed_mismatch: Option<u64>,
}

impl std::fmt::Display for LedgerReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.fresh {
            write!(f, "epoch ledger: new")?;
        } else {
            write!(
                f,
                "epoch ledger: {} jobs and {} recipe views put back, {} samples served in their epochs",
                self.jobs, self.recipe_views, self.samples
            )?;
        }
        write!(f, ", {} bytes in use", self.bytes)?;
        if self.dropped > 0 {
            write!(f, ", {} regions of no job cleared", self.dropped)?;
        }
        if let Some(seed) = self.seed_mismatch {
            write!(f, ", made with seed {seed}, not this mount's")?;
        }
        Ok(())
    }
}

impl Jobs {
    /// Keeps the jobs' epochs in `file` from now on, across restarts of the server: a ledger
    /// found there is put back first (see the module documentation), an empty file is made one.
    /// Call it before serving, once. A ledger made for another catalog, of another format, or
    /// whose header does not check is refused ([`LedgerError`]), left as it is, and nothing is
    /// recorded.
    pub fn attach_ledger(&self, file: File) -> Result<LedgerReport, LedgerError> {
        if self.has_ledger() {
            return Err(LedgerError::AlreadyAttached);
        }
        if !self.active().is_empty() {
            return Err(LedgerError::JobsExist);
        }
        let (files, samples) = self.catalog_size();
        let opened = EpochLedger::open(file, files, samples, self.seed())?;
        let ledger = Arc::new(opened.ledger);
        let mut report = LedgerReport {
            fresh: opened.fresh,
            seed_mismatch: (opened.seed != self.seed()).then_some(opened.seed),
            ..LedgerReport::default()
        };
        if !opened.fresh {
            for slot in 0..MAX_JOBS {
                // A slot that cannot be read (a failing file) is left as it is: the others are
                // put back all the same.
                if let Err(e) = self.replay_slot(&ledger, slot, &mut report) {
                    tracing::warn!(slot, "epoch ledger: a slot not read back ({e})");
                    report.dropped += 1;
                }
            }
        }
        if !self.set_ledger(Arc::clone(&ledger)) {
            return Err(LedgerError::AlreadyAttached);
        }
        report.bytes = ledger.bytes_in_use();
        if report.seed_mismatch.is_some() {
            tracing::warn!("{report}");
        } else {
            tracing::info!("{report}");
        }
        Ok(report)
    }

    /// Puts back the job of `slot`'s regions, if they hold one; clears the regions that do not.
    fn replay_slot(&self, ledger: &Arc<EpochLedger>, slot: usize, report: &mut LedgerReport) -> io::Result<()> {
        let Some(top) = ledger.read_region(slot, 0)? else {
            // No job here: anything left in the slot's views is a torn write's or an
            // interrupted retirement's.
            if ledger.region_touched(slot, 0)? {
                ledger.clear_region(slot, 0)?;
                report.dropped += 1;
            }
            return drop_views(ledger, slot, report);
        };
        let (files, samples) = self.catalog_size();
        let view = LedgerView::restored(ledger, &top, None);
        let job = match self.restore(&top.name, top.owner, slot, top.generation, view) {
            Ok(job) => job,
            Err(why) => {
                tracing::warn!(job = %prepfs_base::escape::escaped(&top.name), slot, "epoch ledger: a job not put back: {why}");
                ledger.clear_region(slot, 0)?;
                report.dropped += 1;
                return drop_views(ledger, slot, report);
            }
        };
        report.jobs += 1;
        report.samples += restore_view(ledger, &job, &top)?;
        let retired = job.ledger.as_ref().map(|l| Arc::clone(l.retired_flag()));
        for recipe in RECIPE_VIEWS {
            match ledger.read_region(slot, recipe)? {
                Some(header) if header.same_job(&top) => {
                    let view = LedgerView::restored(ledger, &header, retired.as_ref());
                    let state = job.recipe_view(recipe, files, samples, Some(view));
                    report.recipe_views += 1;
                    report.samples += restore_view(ledger, &state, &header)?;
                }
                _ => drop_view(ledger, slot, recipe, report)?,
            }
        }
        Ok(())
    }
}

/// Clears `slot`'s recipe views that hold anything (none of them a job's).
fn drop_views(ledger: &EpochLedger, slot: usize, report: &mut LedgerReport) -> io::Result<()> {
    for recipe in RECIPE_VIEWS {
        drop_view(ledger, slot, recipe, report)?;
    }
    Ok(())
}

/// Clears region (slot, view) if it holds anything.
fn drop_view(ledger: &EpochLedger, slot: usize, view: u8, report: &mut LedgerReport) -> io::Result<()> {
    if ledger.region_touched(slot, view)? {
        ledger.clear_region(slot, view)?;
        report.dropped += 1;
    }
    Ok(())
}

/// Puts one view of a job back in its epoch with the samples served there; returns how many.
fn restore_view(ledger: &EpochLedger, job: &crate::Job, header: &RegionHeader) -> io::Result<u64> {
    let mut served: Vec<FileId> = Vec::new();
    if header.clearing {
        // A wrap's clearing was interrupted: finish it (nothing is served in that epoch yet).
        if let Some(view) = &job.ledger {
            view.rolled(header.epoch);
        }
    } else if !header.shared {
        ledger.tagged(header.slot, header.view, tag(header.epoch), |s| served.push(s))?;
    }
    Ok(job.restore_epoch(header.epoch, &served))
}
