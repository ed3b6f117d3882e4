//! The benchmark's output: tables on stdout with the targets judged, and the JSON,
//! CSV and SVG files asked for.

mod csv;
mod json;
mod peers;
mod svg;
mod tables;
mod targets;

use std::path::Path;

use crate::args::BenchArgs;
use crate::failure::Failure;
use crate::figures::Report;

/// Prints the tables (unless the JSON goes to stdout) and writes the files asked for.
pub(crate) fn emit(r: &Report, args: &BenchArgs) -> Result<(), Failure> {
    let mut targets = targets::targets(r);
    if let Some(p) = &r.peers {
        peers::targets(r.dialect, p, &mut targets);
    }
    let to_stdout = args.json.as_deref() == Some(Path::new("-"));
    if !to_stdout {
        print!("{}", tables::tables(r, &targets, args));
    }
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&json::to_json(r, &targets, args))
            .map_err(|e| Failure::Other(format!("cannot write JSON: {e}")))?;
        if to_stdout {
            println!("{text}");
        } else {
            write(path, &text)?;
        }
    }
    if let Some(path) = &args.csv {
        write(path, &csv::to_csv(r))?;
    }
    if let Some(path) = &args.svg {
        write(path, &svg::chart(r))?;
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), Failure> {
    std::fs::write(path, text)
        .map_err(|e| Failure::Other(format!("cannot write {}: {e}", path.display())))
}
