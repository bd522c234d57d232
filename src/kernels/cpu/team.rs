//! A team of spinning helpers for the split products of [`super::split`]: the calling thread publishes a
//! job of `parts` pieces, claims pieces itself, and waits only for the pieces a helper claimed; helpers are
//! rayon jobs that spin on the job slot between products and leave after [`IDLE_SPINS`] empty polls.
//!
//! Why not rayon's own fork-join for each product: a decode step is ~200 products of 0.1–0.4 ms (SmolLM2),
//! and every rayon fork wakes a sleeping worker through `Atomics.wait`/`notify`, which in the browser costs
//! about as much as the product saves (measured, 2 cores: 2 threads on rayon's `in_place_scope` decoded at
//! 11–19 tok/s against 18.8 on one). Helpers that stay awake through a step take each new product within a
//! poll, as llama.cpp's threads do; they give their core back once the model goes quiet (a few ms of empty
//! polls), and the next product starts them again with one `rayon::spawn` each.
//!
//! Safety of the borrowed job: the slot holds a pointer to a [`Job`] on the caller's stack. A helper
//! counts itself in [`VISITORS`] before it loads the slot and out after its last touch of the job; the
//! caller returns only after all pieces are done, the slot is cleared, and [`VISITORS`] has been seen at
//! zero (a helper counted in after the clear loads a null slot; all orderings are `SeqCst`).

use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};

/// Empty polls of the slot before a helper leaves (a few milliseconds in V8; natively less).
const IDLE_SPINS: u32 = 1 << 22;

/// One published product: `parts` pieces, run as `work(piece)`.
struct Job<'a> {
    work: &'a (dyn Fn(usize) + Sync),
    parts: usize,
    /// The next piece to claim.
    next: AtomicUsize,
    /// Pieces finished.
    done: AtomicUsize,
}

impl Job<'_> {
    /// Claims and runs pieces until none are left.
    fn help(&self) {
        loop {
            let piece = self.next.fetch_add(1, SeqCst);
            if piece >= self.parts {
                return;
            }
            (self.work)(piece);
            self.done.fetch_add(1, SeqCst);
        }
    }
}

/// The job in progress (type-erased `*const Job`), or null.
static SLOT: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());
/// Helpers between loading [`SLOT`] and their last touch of the job it pointed to.
static VISITORS: AtomicUsize = AtomicUsize::new(0);
/// Helpers alive (spinning or working).
static HELPERS: AtomicUsize = AtomicUsize::new(0);
/// Jobs published so far: a helper that has helped with job `e` polls for `e + 1` (consecutive jobs of one
/// caller often sit at the same stack address, so the pointer cannot tell them apart).
static EPOCH: AtomicUsize = AtomicUsize::new(0);

/// Runs `work(piece)` for every piece in `0..parts`, with up to `helpers` helpers beside the calling
/// thread, and returns when all are done. Another product already in flight (a second caller) runs alone.
pub fn run(parts: usize, helpers: usize, work: &(dyn Fn(usize) + Sync)) {
    let job = Job {
        work,
        parts,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    };
    let ptr = (&raw const job).cast::<()>().cast_mut();
    if SLOT
        .compare_exchange(std::ptr::null_mut(), ptr, SeqCst, SeqCst)
        .is_err()
    {
        job.help();
        return;
    }
    let before = EPOCH.fetch_add(1, SeqCst);
    while HELPERS.load(SeqCst) < helpers {
        HELPERS.fetch_add(1, SeqCst);
        // A helper started for this job counts it as not yet seen (loading EPOCH when it starts would
        // count it as seen, and it would sit out the very product it was started for).
        rayon::spawn(move || helper(before));
    }
    job.help();
    while job.done.load(SeqCst) < parts {
        std::hint::spin_loop();
    }
    SLOT.store(std::ptr::null_mut(), SeqCst);
    while VISITORS.load(SeqCst) > 0 {
        std::hint::spin_loop();
    }
}

/// A helper: polls the slot, helps with each job it finds after epoch `seen`, and leaves after
/// [`IDLE_SPINS`] empty polls.
fn helper(mut seen: usize) {
    let mut idle = 0;
    while idle < IDLE_SPINS {
        let epoch = EPOCH.load(SeqCst);
        if epoch == seen || SLOT.load(SeqCst).is_null() {
            idle += 1;
            std::hint::spin_loop();
            continue;
        }
        seen = epoch;
        VISITORS.fetch_add(1, SeqCst);
        let ptr = SLOT.load(SeqCst);
        if !ptr.is_null() {
            // SAFETY: a non-null slot loaded while counted in VISITORS points to a live Job: its caller
            // clears the slot and waits for VISITORS to reach zero before the Job goes out of scope.
            let job = unsafe { &*ptr.cast::<Job<'_>>() };
            job.help();
            idle = 0;
        }
        VISITORS.fetch_sub(1, SeqCst);
    }
    HELPERS.fetch_sub(1, SeqCst);
}
