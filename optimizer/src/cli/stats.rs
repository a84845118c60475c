//! `kvcm-optimizer stats`: what is in a trace, and the best hit rate any cache could reach on it.

use super::*;

pub(super) fn run(args: StatsArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let trace = load(&args.trace)?;
    let load_s = started.elapsed().as_secs_f64();
    let unbounded = trace.unbounded_hit_blocks();
    let chain = trace.prefix_chain_check();
    println!("format:            {}", args.trace.format);
    println!("requests:          {}", trace.requests());
    println!("block accesses:    {}", trace.accesses());
    println!("distinct blocks:   {}", trace.distinct_blocks());
    println!(
        "request length:    mean {:.1}, max {} blocks",
        trace.accesses() as f64 / trace.requests().max(1) as f64,
        trace.max_request_len()
    );
    println!("time span:         {:.3} s", trace.span_us() as f64 / 1e6);
    println!(
        "max hit rate:      {:.4} ({} hit blocks with an unbounded cache)",
        unbounded as f64 / trace.accesses().max(1) as f64,
        unbounded
    );
    if chain.inconsistent_blocks == 0 {
        println!("prefix-chained:    yes (every block always has the same parent)");
    } else {
        println!(
            "prefix-chained:    no ({} blocks appear after different parents); opt is then the per-block optimum, not necessarily the prefix-hit optimum",
            chain.inconsistent_blocks
        );
    }
    println!("loaded in:         {load_s:.3} s");
    Ok(())
}
