//! Hit density: the arithmetic of the `adaptive` eviction policy (`optimizer/src/policy/
//! adaptive.rs` simulates it; kvcm-worker runs it live, `lua/evict.lua`). Pure arithmetic with
//! no dependency, its own crate so that the optimizer and kvcm-core (`kvcm_core::hit_density`)
//! share it: the worker ranks leaves exactly as the simulation does.
//!
//! The policy counts two kinds of events per **age bucket** (time since a leaf's last access,
//! log-scaled, [`bucket`]): a *hit* when a read's deepest block is a serving leaf, an *eviction*
//! when a leaf is evicted. From those histograms, the hit density of a leaf at age `a` is the
//! hits a leaf of that age still gets, per unit of time it still occupies the cache (LHD,
//! Beckmann et al., NSDI '18):
//!
//! ```text
//! density(a) = Σ_{x≥a} hits(x) / Σ_{x≥a} (hits(x) + evictions(x)) · (t(x) − t(a) + w(x)/2)
//! ```
//!
//! where `t(x)` is the age at which bucket `x` starts and `w(x)` its width. Each eviction samples
//! leaves and evicts the one with the lowest density, the least recently accessed on a tie; an
//! empty histogram makes every density 0, i.e. sampled LRU. Histograms decay (× [`DECAY`]) every
//! [`DECAY_EVENTS`] events so the ranking follows a workload that changes.
//!
//! Example (a conversation workload whose turns come back 5–60 s after the last one, or never):
//! leaves read back within a minute score high at 10 s and higher at 50 s (their turn is due),
//! then fall to 0 past 60 s, where LRU would have kept them over a leaf touched 30 s ago.

/// Age buckets: bucket `b` starts at `2^(b/4) − 1` ms (four per doubling; the last one, 127,
/// holds every age from ~42 days on).
pub const BUCKETS: usize = 128;
/// Leaves sampled per eviction.
pub const SAMPLES: usize = 32;
/// Events between two decays of the histograms.
pub const DECAY_EVENTS: u64 = 2_048;
/// Weight the histograms keep at each decay.
pub const DECAY: f64 = 0.9;

/// The age bucket of an age in milliseconds: `min(127, ⌊4·log2(age + 1)⌋)`.
pub fn bucket(age_ms: u64) -> usize {
    let b = (4.0 * ((age_ms as f64) + 1.0).log2()) as usize;
    b.min(BUCKETS - 1)
}

/// The age (ms) at which bucket `b` starts.
fn bucket_start(b: usize) -> f64 {
    (b as f64 / 4.0).exp2() - 1.0
}

/// The density of every age bucket from the hit and eviction histograms (each [`BUCKETS`]
/// long; shorter ones are read as zero-padded).
pub fn densities(hits: &[f64], evictions: &[f64]) -> Vec<f64> {
    let at = |v: &[f64], b: usize| v.get(b).copied().unwrap_or(0.0);
    let mut table = vec![0.0; BUCKETS];
    // From the oldest bucket down, for a leaf now at age t(b): hits still to come, events still
    // to come, Σ events(x)·(t(x) − t(b)) over later buckets, and Σ events(x)·w(x)/2.
    let (mut hits_above, mut events_above, mut lifetime, mut halves) = (0.0, 0.0, 0.0, 0.0);
    for b in (0..BUCKETS).rev() {
        let width = bucket_start(b + 1) - bucket_start(b);
        // Every event from bucket b + 1 on is one bucket width further from t(b) than from t(b+1).
        lifetime += events_above * width;
        let events = at(hits, b) + at(evictions, b);
        hits_above += at(hits, b);
        events_above += events;
        halves += events * width / 2.0;
        let time = lifetime + halves;
        table[b] = if time > 0.0 { hits_above / time } else { 0.0 };
    }
    table
}

/// What one event adds to a histogram cell as kvcm stores it: integers (`HINCRBY`, cheaper in
/// Valkey than `HINCRBYFLOAT`), in thousandths, so that decays keep three decimals. Densities
/// are ratios of hits to events, so the scale cancels; [`MIN_CLASS_HITS`] is in events.
pub const UNIT: i64 = 1_000;

/// The ghost of evicted shared blocks holds at most 1/`GHOST_DIVISOR` of the largest resident
/// count seen (docs/optimizer.md: a tenth gives the same hit rates as remembering every one; a
/// hundredth stays within a point). That count includes a request's new blocks before the
/// replay evicts down to capacity, as a live cache's would between a write and its reclaim.
pub const GHOST_DIVISOR: usize = 10;

/// The `LONG_RUN`-th new block of a request's run of new blocks, and every one after it, is in
/// the *long write* class (docs/optimizer.md: 8 and 32 trade cells with 16, no clear winner).
pub const LONG_RUN: u32 = 16;

/// Classes of leaves, each with its own histograms and table: 0 the rest, 1 shared, 2 long
/// write (docs/optimizer.md, "Classes the store can keep").
pub const CLASSES: usize = 3;
/// Bit of a block record's flags byte (lua/lib/record.lua) that marks a shared block.
pub const SHARED_BIT: u8 = 2;
/// Bit of a block record's flags byte that marks a long write.
pub const LONG_BIT: u8 = 4;

/// The class of a block from its record's flags byte: shared before long write.
pub fn class_of(flags: u8) -> usize {
    if flags & SHARED_BIT != 0 {
        1
    } else if flags & LONG_BIT != 0 {
        2
    } else {
        0
    }
}

/// The histogram cell of an event: its class's first bucket plus its age's bucket.
pub fn cell(class: usize, age_ms: u64) -> usize {
    class * BUCKETS + bucket(age_ms)
}

/// Every class's densities, class after class, from per-cell hits and evictions
/// (`CLASSES × BUCKETS` each; shorter ones are read as zero-padded).
pub fn table(hits: &[f64], evictions: &[f64]) -> Vec<f64> {
    // Class `c`'s cells, borrowed (`densities` reads a short slice as zero-padded).
    fn part(v: &[f64], c: usize) -> &[f64] {
        v.get(c * BUCKETS..((c + 1) * BUCKETS).min(v.len())).unwrap_or(&[])
    }
    let pooled = |v: &[f64]| -> Vec<f64> {
        (0..BUCKETS).map(|b| (0..CLASSES).map(|c| v.get(c * BUCKETS + b).copied().unwrap_or(0.0)).sum()).collect()
    };
    let all = densities(&pooled(hits), &pooled(evictions));
    (0..CLASSES)
        .flat_map(|c| {
            let h = part(hits, c);
            if h.iter().sum::<f64>() < MIN_CLASS_HITS { all.clone() } else { densities(h, part(evictions, c)) }
        })
        .collect()
}

/// A class with less than this many hits in its (decayed) histograms is ranked by the table of
/// every class pooled. Ranked by its own, a class that has not been hit yet is worth nothing:
/// its leaves go first, so none lives long enough to be hit, and it never learns otherwise. On
/// 2,000 requests of `chat` at 2%, a third of the seeds fell into that trap with the shared
/// class (44.7–45.3% against 49–50.5%); with the pool, every seed lands at 52.5–53.6%
/// (docs/optimizer.md, "adaptive live"). Thresholds of 0.5–2 gave the same; 4 and more let the
/// trap back in.
pub const MIN_CLASS_HITS: f64 = 1.0;

/// The characters of one cell's rank in the `ranks` field `lua/evict.lua` reads (decimal,
/// zero-padded: every rank of a table is under 10^`RANK_WIDTH`).
pub const RANK_WIDTH: usize = 3;
const _: () = assert!(CLASSES * BUCKETS <= 10usize.pow(RANK_WIDTH as u32), "a rank must fit RANK_WIDTH digits");

/// Each cell's dense rank by density: 0 for the lowest, equal densities share a rank, so that
/// ranks compare as the densities do ([`colder`] gives the same answer on either). Eviction only
/// compares densities; `lua/evict.lua` reads a sampled leaf's rank at a fixed offset of one
/// string instead of parsing the whole table of numbers on every call: evict calls of 4 leaves
/// went from ~400 to ~330 µs (docs/benchmarks.md, "adaptive live: what it costs").
pub fn ranks(table: &[f64]) -> Vec<usize> {
    let mut distinct = table.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup_by(|a, b| a.total_cmp(b).is_eq());
    table.iter().map(|d| distinct.partition_point(|x| x.total_cmp(d).is_lt())).collect()
}

/// [`ranks`] as `lua/evict.lua` reads them: [`RANK_WIDTH`] digits per cell, cell after cell.
pub fn ranks_field(table: &[f64]) -> String {
    let mut out = String::with_capacity(table.len() * RANK_WIDTH);
    for r in ranks(table) {
        out.push_str(&format!("{r:0width$}", width = RANK_WIDTH));
    }
    out
}

/// Which of two candidates to evict first: the lower density, then the older last access.
pub fn colder(a: (f64, u64), b: (f64, u64)) -> bool {
    a.0 < b.0 || (a.0 == b.0 && a.1 < b.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_order_cells_as_their_densities_do_ties_included() {
        let table = [0.5, 0.0, 0.25, 0.5, 1e-9, 0.0, 3.0];
        assert_eq!(ranks(&table), [3, 0, 2, 3, 1, 0, 4]);
        assert_eq!(ranks_field(&table), "003000002003001000004");
        // Every pair of a larger table, with many ties, compares the same either way.
        let mut seed = 7u64;
        let table: Vec<f64> = (0..CLASSES * BUCKETS)
            .map(|_| {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((seed >> 40) % 50) as f64 / 7.0
            })
            .collect();
        let r = ranks(&table);
        assert!(r.iter().all(|&x| x < 10usize.pow(RANK_WIDTH as u32)));
        for i in 0..table.len() {
            for j in 0..table.len() {
                assert_eq!(colder((table[i], 1), (table[j], 2)), colder((r[i] as f64, 1), (r[j] as f64, 2)));
            }
        }
        let field = ranks_field(&table);
        assert_eq!(field.len(), table.len() * RANK_WIDTH);
        assert_eq!(field[RANK_WIDTH * 5..RANK_WIDTH * 6].parse::<usize>().unwrap(), r[5]);
    }

    #[test]
    fn buckets_are_log_scaled_and_capped() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 4);
        assert_eq!(bucket(3), 8);
        assert_eq!(bucket(1_000), 39);
        assert_eq!(bucket(60_000), 63);
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        for b in 0..BUCKETS - 1 {
            let (start, next) = (bucket_start(b), bucket_start(b + 1));
            assert!(start < next);
            // The first whole millisecond of the bucket, and the last one before the next, fall
            // in it (buckets narrower than a millisecond hold no whole one).
            let (first, last) = (start.ceil() as u64, next.ceil() as u64 - 1);
            if (first as f64) < next {
                assert_eq!(bucket(first), b, "bucket {b} starts at {start} ms");
                assert_eq!(bucket(last), b, "bucket {b} ends before {next} ms");
            }
        }
    }

    #[test]
    fn an_empty_history_ranks_by_age_alone() {
        assert!(densities(&[], &[]).iter().all(|&d| d == 0.0));
        assert!(colder((0.0, 5), (0.0, 9)), "equal densities: the older goes first");
        assert!(!colder((0.5, 5), (0.0, 9)), "a lower density goes first whatever its age");
    }

    #[test]
    fn a_class_never_hit_is_ranked_by_every_class_pooled() {
        // The rest class is read back at ~1 s; the shared class has only evictions so far.
        let (mut hits, mut evictions) = (vec![0.0; CLASSES * BUCKETS], vec![0.0; CLASSES * BUCKETS]);
        hits[bucket(1_000)] = 50.0;
        evictions[bucket(60_000)] = 50.0;
        evictions[BUCKETS + bucket(10)] = 5.0;
        let t = table(&hits, &evictions);
        let young = bucket(100);
        assert!(t[young] > 0.0);
        assert!(t[BUCKETS + young] > 0.0, "a shared leaf is not worthless before its class is ever hit");
        // Once hit, a class has a table of its own.
        hits[BUCKETS + bucket(10)] = 1.0;
        let t = table(&hits, &evictions);
        assert_eq!(t[BUCKETS + bucket(1_000)], 0.0, "past its only hit's age, nothing more comes");
    }

    #[test]
    fn leaves_read_back_at_a_known_age_are_worth_most_just_before_it_and_nothing_after() {
        // Every leaf is read back at ~1 minute (bucket 63) or evicted at ~10 minutes.
        let (mut hits, mut evictions) = (vec![0.0; BUCKETS], vec![0.0; BUCKETS]);
        hits[bucket(60_000)] = 100.0;
        evictions[bucket(600_000)] = 100.0;
        let d = densities(&hits, &evictions);
        let (young, due, late) = (d[bucket(1_000)], d[bucket(50_000)], d[bucket(120_000)]);
        assert!(due > young, "a leaf whose read is due is worth more than a fresh one: {due} vs {young}");
        assert_eq!(late, 0.0, "past the age of every hit, nothing more comes");
        assert!(young > 0.0);
    }
}
