//! The value parsers of the `openshell` command line (durations, thresholds,
//! `KEY=VALUE` pairs, times, operation states), as a library so that the
//! fuzz targets of `fuzz/` can feed them arbitrary text. Everything else of
//! the CLI lives in the binary.

pub mod parse;
