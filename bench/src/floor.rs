//! The floor of single-sandbox latency, measured in the same run: what one change cannot
//! avoid on this machine today. A SQLite commit with the gateway's settings, the fsync a
//! supervisor's file applier makes to activate a generation, and one gRPC round trip to the
//! gateway under test. Latency is then reported as a multiple of their p50 sum, which says
//! more than milliseconds on a machine whose speed changes from day to day.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use openshell_sdk::Client;
use serde::Serialize;
use sqlx::Connection;

use crate::stats::{Summary, round3};

#[derive(Debug, Clone, Serialize)]
pub struct LatencyFloor {
    pub samples: usize,
    /// `BEGIN; INSERT; COMMIT` on a SQLite file in WAL mode with `synchronous = NORMAL`,
    /// the gateway's settings.
    pub sqlite_commit: Summary,
    /// Write a small file, fsync it, rename it into place, fsync the directory: how the file
    /// applier makes a generation active.
    pub apply_fsync: Summary,
    /// `GetGatewayInfo` to the gateway under test, through the SDK client.
    pub grpc_round_trip: Summary,
    /// The sum of the three p50s.
    pub p50_ms: f64,
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1000.0
}

/// Measures each part `samples` times; `dir` holds the scratch database and files.
pub async fn measure(dir: &Path, client: &Client, samples: usize) -> Result<LatencyFloor> {
    let sqlite_commit = Summary::of(&sqlite_commits(dir, samples).await?);
    let fsync_dir = dir.to_path_buf();
    let apply_fsync = Summary::of(
        &tokio::task::spawn_blocking(move || apply_fsyncs(&fsync_dir, samples))
            .await
            .context("fsync measurement stopped")??,
    );
    let mut round_trips = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        client
            .gateway_info()
            .await
            .context("GetGatewayInfo failed while measuring the floor")?;
        round_trips.push(ms_since(start));
    }
    let grpc_round_trip = Summary::of(&round_trips);
    let p50_ms = round3(sqlite_commit.p50_ms + apply_fsync.p50_ms + grpc_round_trip.p50_ms);
    Ok(LatencyFloor {
        samples,
        sqlite_commit,
        apply_fsync,
        grpc_round_trip,
        p50_ms,
    })
}

async fn sqlite_commits(dir: &Path, samples: usize) -> Result<Vec<f64>> {
    let path = dir.join("floor.sqlite");
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let mut conn = sqlx::SqliteConnection::connect(&url)
        .await
        .with_context(|| format!("cannot open {}", path.display()))?;
    sqlx::raw_sql(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; \
         CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, value TEXT NOT NULL)",
    )
    .execute(&mut conn)
    .await?;
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples {
        let start = Instant::now();
        let mut tx = conn.begin().await?;
        sqlx::query("INSERT INTO floor (value) VALUES ($1)")
            .bind(format!("value-{i}"))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        times.push(ms_since(start));
    }
    conn.close().await?;
    std::fs::remove_file(&path).ok();
    Ok(times)
}

fn apply_fsyncs(dir: &Path, samples: usize) -> Result<Vec<f64>> {
    let staged = dir.join("floor-staged.json");
    let active = dir.join("floor-active.json");
    let content = vec![b'x'; 2048];
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let mut file = std::fs::File::create(&staged)?;
        file.write_all(&content)?;
        file.sync_all()?;
        std::fs::rename(&staged, &active)?;
        std::fs::File::open(dir)?.sync_all()?;
        times.push(ms_since(start));
    }
    std::fs::remove_file(&active).ok();
    Ok(times)
}
