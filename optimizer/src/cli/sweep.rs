//! `kvcm-optimizer sweep`: every policy at every capacity, the curves, the recommendations.

use super::*;

pub(super) fn run(args: SweepArgs) -> anyhow::Result<()> {
    let params = args.policy.params()?;
    let block_bytes = parse_block_bytes(args.block_bytes.as_deref())?;
    check_fraction("--target-fraction", args.target_fraction)?;
    for &f in &args.capacity_fractions {
        check_fraction("--capacity-fractions", f)?;
    }
    if args.policies.is_empty() {
        bail!(
            "--policies is empty; name at least one of lru, lfu, ttl, random_lru, leaf_lru, s3fifo, leaf_lfu, adaptive, opt"
        );
    }
    let mut sizes = Vec::with_capacity(args.bytes.len());
    for text in &args.bytes {
        sizes.push(crate::sweep::parse_size(text).map_err(|e| anyhow::anyhow!("--bytes: {e}"))?);
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating output directory {}", args.out.display()))?;

    let trace = load(&args.trace)?;
    let ctx = report_context(&trace, args.trace.format, &args.savings, block_bytes);

    let mut capacities = args.capacities.clone();
    if !args.capacity_fractions.is_empty() {
        capacities.extend(crate::sweep::capacities_from_fractions(trace.distinct_blocks(), &args.capacity_fractions));
    }
    if let Some(block_bytes) = block_bytes {
        capacities.extend(crate::sweep::capacities_from_bytes(&sizes, block_bytes));
    }
    if capacities.is_empty() {
        capacities = crate::sweep::capacities_from_fractions(trace.distinct_blocks(), &crate::sweep::DEFAULT_FRACTIONS);
    }
    capacities.sort_unstable();
    capacities.dedup();
    let mut policies = args.policies.clone();
    policies.dedup();

    let config = SweepConfig { capacities, policies, params };
    let jobs = config.capacities.len() * config.policies.len();
    let progress = if args.no_progress || !std::io::stderr().is_terminal() {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::with_draw_target(Some(jobs as u64), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {bar:40} {pos}/{len} replays, {elapsed} elapsed, ETA {eta} {msg}")
                .expect("the progress template is valid"),
        );
        bar
    };

    let started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()
        .context("starting the sweep's thread pool")?;
    let rows = pool.install(|| {
        crate::sweep::run_sweep(&trace, &config, |row| {
            progress.inc(1);
            progress.set_message(format!("{} @ {}", row.policy, row.capacity));
            tracing::debug!(
                policy = %row.policy,
                capacity = row.capacity,
                hit_rate = row.stats.hit_rate(),
                "replay done"
            );
        })
    });
    progress.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();

    let trace_name =
        args.trace.trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "trace".into());
    let recs = report::recommend(&rows, ctx.max_hit_rate, args.target_fraction);
    let mut written = vec![
        report::write_file(&args.out, "sweep.csv", &report::sweep_csv(&rows, &ctx))?,
        report::write_file(
            &args.out,
            "recommendation.csv",
            &report::recommendation_csv(&recs, args.target_fraction, &ctx),
        )?,
        report::write_file(
            &args.out,
            "recommendation.md",
            &report::recommendation_md(&recs, args.target_fraction, &ctx, &trace_name),
        )?,
        report::write_file(&args.out, "hit_rate_table.md", &report::hit_rate_table_md(&rows, &ctx))?,
    ];
    let formats = match args.plot {
        PlotChoice::Both => PlotFormats { svg: true, png: true },
        PlotChoice::Svg => PlotFormats { svg: true, png: false },
        PlotChoice::Png => PlotFormats { svg: false, png: true },
        PlotChoice::None => PlotFormats { svg: false, png: false },
    };
    let title = format!("Hit rate vs capacity — {trace_name} ({} distinct blocks)", trace.distinct_blocks());
    let plotted = plot_hit_rates(&rows, ctx.max_hit_rate, &title, &args.out, formats);
    for why in &plotted.skipped {
        tracing::warn!("plot not written: {why}");
    }
    written.extend(plotted.written);

    print_trace_summary(&trace, &ctx);
    println!();
    print!("{}", report::hit_rate_table_md(&rows, &ctx));
    println!();
    print_recommendations(&recs, args.target_fraction, &ctx);
    println!();
    print_throughput(&rows, wall);
    println!();
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(())
}

fn print_recommendations(recs: &[report::Recommendation], target_fraction: f64, ctx: &ReportContext) {
    println!(
        "recommendation: smallest capacity reaching {:.0}% of the maximum ({:.2}% hit rate):",
        target_fraction * 100.0,
        target_fraction * ctx.max_hit_rate * 100.0
    );
    for rec in recs {
        match rec.row {
            Some(row) => {
                let mut line = format!("  {:<10} {} blocks", rec.policy.name(), row.capacity);
                if let Some(bytes) = ctx.capacity_bytes(row.capacity) {
                    line += &format!(" ({})", report::human_bytes(bytes));
                }
                line += &format!(", hit rate {:.2}%", row.stats.hit_rate() * 100.0);
                if let Some(tokens) = ctx.tokens_saved(row.stats.hit_blocks) {
                    line += &format!(", {tokens} prefill tokens saved");
                }
                if let Some(gpu) = ctx.gpu_seconds_saved(row.stats.hit_blocks) {
                    line += &format!(", {gpu:.1} GPU s saved");
                }
                println!("{line}");
            }
            None => println!(
                "  {:<10} not reached by any swept capacity; sweep larger capacities{}",
                rec.policy.name(),
                if rec.policy == PolicyKind::Ttl { " or a longer --ttl-s" } else { "" }
            ),
        }
    }
    match report::live_choice(recs) {
        Some((policy, row)) => println!("to run in kvcm: reclaim_policy {policy}, capacity {} blocks", row.capacity),
        None => println!("to run in kvcm: no live policy (leaf_lru, leaf_lfu, ttl, adaptive) reached the target"),
    }
}

fn print_throughput(rows: &[SweepRow], wall_s: f64) {
    let accesses: u64 = rows.iter().map(|r| r.stats.requested_blocks).sum();
    let cpu_s: f64 = rows.iter().map(|r| r.seconds).sum();
    println!(
        "simulated {} block accesses in {:.2} s of replay time ({:.2} s wall): {:.2}M accesses/s per core",
        accesses,
        cpu_s,
        wall_s,
        accesses as f64 / cpu_s.max(1e-9) / 1e6
    );
    let mut policies: Vec<PolicyKind> = Vec::new();
    for row in rows {
        if !policies.contains(&row.policy) {
            policies.push(row.policy);
        }
    }
    for policy in policies {
        let (a, s) = rows
            .iter()
            .filter(|r| r.policy == policy)
            .fold((0u64, 0f64), |(a, s), r| (a + r.stats.requested_blocks, s + r.seconds));
        println!("  {:<10} {:.2}M accesses/s", policy.name(), a as f64 / s.max(1e-9) / 1e6);
    }
}
