//! The journal's keeper: a side thread that does the journal's file work off the decision
//! path. It prepares the next file ahead of need (created, reserved on disk, header written,
//! mapped and populated), so a rollover during an append is a swap of mappings; it unmaps the
//! files the appender leaves; and it writes a checkpoint after each completed file (the
//! state after it: open orders, id floors, wire references, session sequences), so a restart
//! replays one checkpoint and the files after it, never the whole day.
//!
//! The appender and the keeper share one mutex, taken by the appender only at a rollover and
//! held by either side only to move a value in or out (never across file I/O).

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use memmap2::MmapMut;

use super::files;
use super::{JournalError, OpenReport, Recovery, Unavailable};

/// Retired mappings the appender can hand over without allocating; beyond this it unmaps
/// them itself.
const RETIRED_MAX: usize = 8;
/// How long a rollover waits for a spare file that is being prepared, once per rollover: up
/// to `ROLL_WAIT_SLICES` waits of `ROLL_WAIT_SLICE` (1 s; a spurious wake-up costs a slice, not
/// the whole wait).
const ROLL_WAIT_SLICE: Duration = Duration::from_millis(10);
const ROLL_WAIT_SLICES: u32 = 100;
/// How often a failed preparation (a full disk) is retried.
const RETRY_EVERY: Duration = Duration::from_millis(100);
/// How long the keeper sleeps when it has nothing to do (it is woken for work).
const IDLE: Duration = Duration::from_secs(1);

#[derive(Debug)]
enum Spare {
    /// File `n` should be prepared.
    Wanted(u64),
    /// The keeper is preparing the file asked for.
    Preparing,
    /// File `n` is ready.
    Ready(u64, MmapMut),
    /// Preparing file `n` failed (`State::failure` says how); retried every `RETRY_EVERY`.
    Failed(u64),
    /// Taken by the appender; the next one is asked for at the swap.
    Taken,
}

#[derive(Debug)]
struct State {
    spare: Spare,
    /// Highest journal file number the appender has finished with.
    completed_through: u64,
    /// The last failed preparation (file, errno), until one succeeds: what a rollover reports
    /// while a retry is under way.
    failure: Option<(u64, i32)>,
    retired: Vec<MmapMut>,
    stop: bool,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Wakes the keeper.
    work: Condvar,
    /// Wakes an appender waiting for its spare.
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What the keeper starts from.
#[derive(Debug)]
pub(super) struct KeeperStart {
    pub dir: PathBuf,
    pub file_bytes: u64,
    /// The file being appended to.
    pub current: u64,
    /// The state after every file before `current` (and the index after them), and the
    /// newest checkpoint on disk.
    pub state: Recovery,
    pub state_through: u64,
    pub state_next_index: u64,
    pub checkpoint: Option<u64>,
}

/// The appender's handle on its keeper; dropping it stops the keeper after it has written
/// the checkpoints of every completed file.
#[derive(Debug)]
pub(super) struct Keeper {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    pub fn start(start: KeeperStart) -> Result<Self, JournalError> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                spare: Spare::Wanted(start.current + 1),
                completed_through: start.current - 1,
                failure: None,
                retired: Vec::with_capacity(RETIRED_MAX),
                stop: false,
            }),
            work: Condvar::new(),
            ready: Condvar::new(),
        });
        let theirs = Arc::clone(&shared);
        let dir = start.dir.clone();
        let thread = std::thread::Builder::new()
            .name("keel-journal".into())
            .spawn(move || run(&theirs, start))
            .map_err(files::io(&dir))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Takes the prepared file `n`. Waits (a bounded time, once per rollover: `*waited`
    /// remembers) for a preparation under way; refuses at once when preparing failed.
    pub fn take_spare(&self, n: u64, waited: &mut bool) -> Result<MmapMut, Unavailable> {
        let mut state = self.shared.lock();
        let mut slices = if *waited { 0 } else { ROLL_WAIT_SLICES };
        *waited = true;
        loop {
            match std::mem::replace(&mut state.spare, Spare::Taken) {
                Spare::Ready(m, map) if m == n => return Ok(map),
                other => state.spare = other,
            }
            // Retries happen in the keeper; a rollover does not wait for them.
            if let Some((file_no, errno)) = state.failure {
                return Err(Unavailable::Reserve { file_no, errno });
            }
            if slices == 0 {
                return Err(Unavailable::NotReady { file_no: n });
            }
            slices -= 1;
            self.shared.work.notify_one();
            state = self
                .shared
                .ready
                .wait_timeout(state, ROLL_WAIT_SLICE)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// The appender has left file `done` (its mapping handed over) for `done + 1`: ask for
    /// the next spare and the checkpoint of `done`.
    pub fn retire(&self, done: u64, map: MmapMut) {
        let mut state = self.shared.lock();
        state.completed_through = done;
        state.spare = Spare::Wanted(done + 2);
        if state.retired.len() < state.retired.capacity() {
            state.retired.push(map);
            drop(state);
        } else {
            drop(state);
            drop(map);
        }
        self.shared.work.notify_one();
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.work.notify_one();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                crate::warn_line!("keel: journal keeper thread panicked");
            }
        }
    }
}

/// The keeper's own state: the recovery after every checkpointed file.
struct Compactor {
    dir: PathBuf,
    state: Recovery,
    through: u64,
    next_index: u64,
    newest_checkpoint: Option<u64>,
    broken: bool,
}

fn run(shared: &Shared, start: KeeperStart) {
    let KeeperStart {
        dir,
        file_bytes,
        current: _,
        state,
        state_through,
        state_next_index,
        checkpoint,
    } = start;
    let mut compactor = Compactor {
        dir: dir.clone(),
        state,
        through: state_through,
        next_index: state_next_index,
        newest_checkpoint: checkpoint,
        broken: false,
    };
    compactor.catch_up();
    let mut retired = Vec::with_capacity(RETIRED_MAX);
    let mut pause_before_retry = false;
    let mut state = shared.lock();
    loop {
        // Unmap what the appender left, outside the lock.
        // `append` leaves the shared vector its capacity: the appender never allocates.
        retired.append(&mut state.retired);
        if !retired.is_empty() {
            drop(state);
            release(&mut retired);
            state = shared.lock();
            continue;
        }
        if matches!(state.spare, Spare::Failed(_)) && pause_before_retry && !state.stop {
            // Wait before retrying a failed preparation (the disk is full: space comes back
            // when an operator frees it), leaving `Failed` visible to the appender meanwhile.
            pause_before_retry = false;
            state = shared
                .work
                .wait_timeout(state, RETRY_EVERY)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            continue;
        }
        let want = match state.spare {
            Spare::Wanted(n) | Spare::Failed(n) if !state.stop => Some(n),
            _ => None,
        };
        if let Some(n) = want {
            let retry = matches!(state.spare, Spare::Failed(_));
            state.spare = Spare::Preparing;
            drop(state);
            let made = files::create_journal(&dir, n, file_bytes);
            state = shared.lock();
            pause_before_retry = made.is_err();
            state.spare = spare_from(&mut state, n, made, retry);
            shared.ready.notify_all();
            continue;
        }
        let completed = state.completed_through;
        if compactor.through < completed && !compactor.broken {
            drop(state);
            compactor.compact(compactor.through + 1);
            state = shared.lock();
            continue;
        }
        if state.stop {
            break;
        }
        state = shared
            .work
            .wait_timeout(state, IDLE)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
    // A spare nobody will use: give its space back.
    if let Spare::Ready(n, map) = std::mem::replace(&mut state.spare, Spare::Taken) {
        drop(map);
        let _ = std::fs::remove_file(files::journal_path(&dir, n));
    }
}

/// Syncs and unmaps completed files: they reach the disk here, off the decision path.
fn release(retired: &mut Vec<MmapMut>) {
    for map in retired.drain(..) {
        if let Err(e) = map.flush() {
            crate::warn_line!("keel: journal: sync of a completed file: {e}");
        }
    }
}

/// The spare slot after preparing file `n`; a failure is remembered (and said once, not at
/// every retry).
fn spare_from(
    state: &mut State,
    n: u64,
    made: Result<MmapMut, JournalError>,
    retry: bool,
) -> Spare {
    match made {
        Ok(map) => {
            state.failure = None;
            Spare::Ready(n, map)
        }
        Err(e) => {
            if !retry {
                crate::warn_line!("keel: journal: next file not reserved ({e}); retrying");
            }
            let errno = io_errno(&e);
            state.failure = Some((n, errno));
            Spare::Failed(n)
        }
    }
}

fn io_errno(e: &JournalError) -> i32 {
    match e {
        JournalError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        _ => libc::EIO,
    }
}

impl Compactor {
    /// The state handed over may be newer than the newest checkpoint (opening replayed files
    /// after it): record it, so the next start reads less.
    fn catch_up(&mut self) {
        if self.through > 0 && self.newest_checkpoint.is_none_or(|c| c < self.through) {
            self.write();
        }
    }

    /// Folds completed file `n` into the state and writes checkpoint `n`.
    fn compact(&mut self, n: u64) {
        let path = files::journal_path(&self.dir, n);
        let folded = files::open_completed(&path).and_then(|map| {
            let mut report = OpenReport::default();
            let state = &mut self.state;
            files::scan(
                &path,
                &map,
                false,
                &mut self.next_index,
                &mut report,
                &mut |r| state.apply(r),
            )
        });
        if let Err(e) = folded {
            // The state is no longer the journal's: stop checkpointing (a restart replays
            // from the last good checkpoint and reports the file).
            crate::warn_line!("keel: journal: checkpoint of file {n} stopped: {e}");
            self.broken = true;
            return;
        }
        self.through = n;
        self.write();
    }

    fn write(&mut self) {
        let records = self.state.snapshot();
        let n = self.through;
        match files::write_checkpoint(&self.dir, n, self.next_index, &records) {
            Ok(()) => {
                // Keep the previous checkpoint as a fallback; older ones are never read.
                if let Some(old) = self.newest_checkpoint.filter(|&c| c < n) {
                    for stale in old.saturating_sub(8)..old {
                        let _ = std::fs::remove_file(files::checkpoint_path(&self.dir, stale));
                    }
                }
                self.newest_checkpoint = Some(n);
            }
            // Not fatal: a restart replays from the previous checkpoint.
            Err(e) => crate::warn_line!("keel: journal: checkpoint {n} not written: {e}"),
        }
    }
}
