//! `kvcm-optimizer replay`: one policy at one capacity.

use super::*;

pub(super) fn run(args: ReplayArgs) -> anyhow::Result<()> {
    let params = args.params.params()?;
    let block_bytes = parse_block_bytes(args.block_bytes.as_deref())?;
    let trace = load(&args.trace)?;
    let ctx = report_context(&trace, args.trace.format, &args.savings, block_bytes);
    let capacity = match (&args.capacity.capacity, &args.capacity.capacity_fraction, &args.capacity.bytes) {
        (Some(blocks), _, _) => *blocks,
        (_, Some(fraction), _) => {
            check_fraction("--capacity-fraction", *fraction)?;
            crate::sweep::capacities_from_fractions(trace.distinct_blocks(), &[*fraction])[0]
        }
        (_, _, Some(text)) => {
            let bytes = crate::sweep::parse_size(text).map_err(|e| anyhow::anyhow!("--bytes: {e}"))?;
            let block_bytes = block_bytes.context("--bytes needs --block-bytes")?;
            crate::sweep::capacities_from_bytes(&[bytes], block_bytes)[0]
        }
        _ => bail!("give one of --capacity, --capacity-fraction, --bytes"),
    };
    let next_use = (args.policy == PolicyKind::Opt).then(|| NextUse::compute(trace.flat(), trace.distinct_blocks()));
    let timed = simulate_timed(&trace, args.policy, capacity, &params, next_use.as_ref());
    let s = timed.stats;
    print_trace_summary(&trace, &ctx);
    println!("policy:            {}", args.policy);
    match ctx.capacity_bytes(capacity) {
        Some(bytes) => println!(
            "capacity:          {capacity} blocks ({}), {:.2}% of distinct blocks",
            report::human_bytes(bytes),
            capacity as f64 / trace.distinct_blocks().max(1) as f64 * 100.0
        ),
        None => println!(
            "capacity:          {capacity} blocks, {:.2}% of distinct blocks",
            capacity as f64 / trace.distinct_blocks().max(1) as f64 * 100.0
        ),
    }
    println!(
        "hit rate:          {:.4} ({:.2}% of the maximum)",
        s.hit_rate(),
        s.hit_rate() / ctx.max_hit_rate.max(1e-12) * 100.0
    );
    println!("hit blocks:        {}", s.hit_blocks);
    println!("requested blocks:  {}", s.requested_blocks);
    println!("evictions:         {}", s.evictions);
    println!("peak resident:     {}", s.peak_resident);
    if let Some(tokens) = ctx.tokens_saved(s.hit_blocks) {
        println!("prefill tokens saved: {tokens}");
    }
    if let Some(gpu) = ctx.gpu_seconds_saved(s.hit_blocks) {
        println!("GPU seconds saved: {gpu:.1}");
    }
    println!("throughput:        {:.2}M block accesses/s ({:.3} s)", timed.accesses_per_second() / 1e6, timed.seconds);
    Ok(())
}
