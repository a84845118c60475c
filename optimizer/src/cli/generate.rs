//! `kvcm-optimizer generate`: a synthetic workload as a trace file.

use super::*;

pub(super) fn run(args: GenerateArgs) -> anyhow::Result<()> {
    // The workload is built in memory before it is written (tens of bytes per block access).
    const MAX_REQUESTS: usize = 10_000_000;
    if args.requests == 0 || args.requests > MAX_REQUESTS {
        bail!("--requests must be at least 1 and at most {MAX_REQUESTS}");
    }
    let requests = crate::workload::generate(args.workload, args.requests, args.seed);
    let file = std::fs::File::create(&args.out).with_context(|| format!("cannot create {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    crate::workload::write_mooncake(&requests, &mut out)
        .and_then(|()| std::io::Write::flush(&mut out))
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    let blocks: usize = requests.iter().map(|r| r.blocks.len()).sum();
    println!(
        "{}: {} requests, {} block accesses, {:.1} s of trace time -> {}",
        args.workload.name(),
        requests.len(),
        blocks,
        requests.last().map_or(0, |r| r.time_ms) as f64 / 1000.0,
        args.out.display()
    );
    Ok(())
}
