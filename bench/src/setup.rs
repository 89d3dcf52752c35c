//! Stores and sandboxes: a SQLite file or a fresh PostgreSQL database per run, and sandboxes
//! created through the SDK exactly as an operator would (each returns its supervisor credential).

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use futures::{StreamExt, TryStreamExt};
use openshell_sdk::Client;
use sqlx::Connection;

use crate::gateway::StoreSpec;
use crate::swarm::SimSandbox;

/// The example policy: every sandbox starts with it; updates change one network port.
pub const POLICY: &str = include_str!("../../examples/policy.yaml");

/// The example policy with its first endpoint on `port` (a network-section change, which
/// sandbox-scoped updates may make).
pub fn policy_with_port(port: u32) -> String {
    POLICY.replacen("port: 443", &format!("port: {port}"), 1)
}

/// A SQLite store in `dir`.
pub fn sqlite_store(dir: &Path) -> Result<StoreSpec> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(StoreSpec {
        backend: "sqlite",
        url: format!("sqlite://{}", dir.join("gateway.db").display()),
        data_dir: dir.to_path_buf(),
        pg_database: None,
    })
}

/// A fresh, empty PostgreSQL database on the server of `admin_url`; returns the store and the
/// database name (to drop it afterwards).
pub async fn postgres_store(admin_url: &str, dir: &Path) -> Result<(StoreSpec, String)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let name = format!("openshell_bench_{}", uuid::Uuid::now_v7().simple());
    let mut conn = sqlx::PgConnection::connect(admin_url)
        .await
        .with_context(|| "cannot connect to PostgreSQL with the given admin URL".to_string())?;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .context("cannot create the benchmark database")?;
    conn.close().await.ok();
    Ok((
        StoreSpec {
            backend: "postgres",
            url: database_url(admin_url, &name),
            data_dir: dir.to_path_buf(),
            pg_database: Some(name.clone()),
        },
        name,
    ))
}

/// A copy of a store whose gateway is stopped: same sandboxes and credentials, nothing else
/// shared, so one scenario's leftovers (e.g. a fleet operation still pending) cannot slow the
/// next one down. SQLite: the files are copied; PostgreSQL: `CREATE DATABASE … TEMPLATE …`.
/// Returns the copy and, for PostgreSQL, the new database's name.
pub async fn clone_store(
    template: &StoreSpec,
    admin_url: Option<&str>,
    dir: &Path,
) -> Result<(StoreSpec, Option<String>)> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // The credential key file (and, for SQLite, the database files).
    for entry in std::fs::read_dir(&template.data_dir)
        .with_context(|| format!("cannot read {}", template.data_dir.display()))?
    {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), dir.join(entry.file_name()))
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    match &template.pg_database {
        None => Ok((
            StoreSpec {
                backend: template.backend,
                url: format!("sqlite://{}", dir.join("gateway.db").display()),
                data_dir: dir.to_path_buf(),
                pg_database: None,
            },
            None,
        )),
        Some(source) => {
            let admin_url = admin_url
                .ok_or_else(|| anyhow!("cloning a PostgreSQL store needs the admin URL"))?;
            let name = format!("openshell_bench_{}", uuid::Uuid::now_v7().simple());
            let mut conn = sqlx::PgConnection::connect(admin_url)
                .await
                .context("cannot connect to PostgreSQL with the given admin URL")?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "CREATE DATABASE {name} TEMPLATE {source}"
            )))
            .execute(&mut conn)
            .await
            .context("cannot copy the benchmark database")?;
            conn.close().await.ok();
            Ok((
                StoreSpec {
                    backend: template.backend,
                    url: database_url(admin_url, &name),
                    data_dir: dir.to_path_buf(),
                    pg_database: Some(name.clone()),
                },
                Some(name),
            ))
        }
    }
}

/// Drops a database made by [`postgres_store`]; best effort.
pub async fn drop_postgres_database(admin_url: &str, name: &str) {
    if let Ok(mut conn) = sqlx::PgConnection::connect(admin_url).await {
        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        if let Err(e) = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut conn)
            .await
        {
            eprintln!("note: could not drop benchmark database {name}: {e}");
        }
        conn.close().await.ok();
    }
}

/// `admin_url` with its database replaced by `name` (query parameters kept).
fn database_url(admin_url: &str, name: &str) -> String {
    let (base, query) = match admin_url.split_once('?') {
        Some((b, q)) => (b.to_string(), format!("?{q}")),
        None => (admin_url.to_string(), String::new()),
    };
    let base = match base.rsplit_once('/') {
        Some((b, _))
            if b.contains("://") && b.split("://").nth(1).is_some_and(|h| !h.is_empty()) =>
        {
            b.to_string()
        }
        _ => base,
    };
    format!("{base}/{name}{query}")
}

/// A sandbox the harness created, with its supervisor credential.
#[derive(Debug, Clone)]
pub struct BenchSandbox {
    pub id: String,
    pub credential: String,
}

impl BenchSandbox {
    pub fn sim(&self, poll_interval_ms: u64) -> SimSandbox {
        SimSandbox {
            id: self.id.clone(),
            credential: self.credential.clone(),
            poll_interval_ms,
            gateway: 0,
        }
    }
}

/// Creates sandboxes `prefix-{i}` for `i` in `range`, `concurrency` at a time, each with the
/// example policy.
pub async fn create_sandboxes(
    client: &Client,
    prefix: &str,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> Result<Vec<BenchSandbox>> {
    futures::stream::iter(range)
        .map(|i| {
            let client = client.clone();
            let name = format!("{prefix}-{i}");
            async move {
                let created = client
                    .create_sandbox(&name, None, Some(POLICY))
                    .await
                    .map_err(|e| anyhow!("cannot create sandbox {name}: {e}"))?;
                Ok::<_, anyhow::Error>(BenchSandbox {
                    id: created.sandbox.id,
                    credential: created.supervisor_credential.expose().to_string(),
                })
            }
        })
        .buffered(concurrency.max(1))
        .try_collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_url_replaces_the_database() {
        assert_eq!(
            database_url("postgres://u:p@127.0.0.1:5432/postgres", "db1"),
            "postgres://u:p@127.0.0.1:5432/db1"
        );
        assert_eq!(
            database_url("postgres://u:p@h/postgres?sslmode=disable", "db1"),
            "postgres://u:p@h/db1?sslmode=disable"
        );
        assert_eq!(database_url("postgres://h", "db1"), "postgres://h/db1");
    }

    #[test]
    fn policy_update_changes_one_port() {
        let p = policy_with_port(1234);
        assert!(p.contains("port: 1234"));
        assert_eq!(
            p.matches("port: 443").count() + 1,
            POLICY.matches("port: 443").count()
        );
    }
}
