//! The flight recorder's rows: one journal per recorded attempt, its text as exported.
//! Which attempts keep one is the runner's (`journal::RecordPolicy`); this module only
//! reads and writes rows and the seal key's text: the journal's file format and its seal
//! are the sandbox's (`sandbox::journal::file`), which converts.

use super::error::Result;
use super::handle::Store;

/// The journals' seal key's name in `jobhost_secrets`.
const SEAL_KEY: &str = "journal-seal";

crate::record! {
    /// A kept journal: `body` is the journal's JSON (empty in a listing).
    #[derive(Debug, Clone, Default, serde::Serialize)]
    pub struct JournalRecord {
        pub run_id: String,
        pub seq: i64,
        pub job: String,
        pub tenant: String,
        pub calls: i64,
        pub bytes: i64,
        /// 1 unless the journal passed its cap (shown as a boolean).
        #[serde(serialize_with = "one_is_true")]
        pub replayable: i64,
        #[serde(skip)]
        pub body: String,
        pub recorded_at: i64,
    }
}

fn one_is_true<S: serde::Serializer>(value: &i64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bool(*value == 1)
}

/// A journal's row as it is put: what a listing shows of it, and its text.
pub struct JournalRow<'a> {
    pub run_id: &'a str,
    pub seq: i64,
    pub job: &'a str,
    pub tenant: &'a str,
    pub calls: usize,
    pub replayable: bool,
    pub body: &'a str,
}

impl Store {
    /// Keeps an attempt's journal (replacing one its seq had).
    pub async fn put_journal(&self, row: &JournalRow<'_>) -> Result<()> {
        let q = &self.q.put_journal;
        with_pool!(self.pool, p => {
            sqlx::query(q.as_str())
                .bind(row.run_id)
                .bind(row.seq)
                .bind(row.job)
                .bind(row.tenant)
                .bind(row.calls as i64)
                .bind(row.body.len() as i64)
                .bind(i64::from(row.replayable))
                .bind(row.body)
                .execute(p)
                .await?;
        });
        Ok(())
    }

    /// The journal of attempt `seq` of a run, or (`None`) its last recorded one.
    pub async fn journal(&self, run_id: &str, seq: Option<i64>) -> Result<Option<JournalRecord>> {
        Ok(match seq {
            Some(seq) => with_pool!(self.reader, p => sqlx::query_as(self.q.journal.as_str())
                .bind(run_id)
                .bind(seq)
                .fetch_optional(p)
                .await?),
            None => with_pool!(self.reader, p => sqlx::query_as(self.q.last_journal.as_str())
                .bind(run_id)
                .fetch_optional(p)
                .await?),
        })
    }

    /// The text of the key that seals journals, if a host has made it.
    pub async fn journal_seal_key(&self) -> Result<Option<String>> {
        let q = &self.q.secret;
        Ok(with_pool!(self.pool, p => sqlx::query_scalar(q.as_str())
            .bind(SEAL_KEY)
            .fetch_optional(p)
            .await?))
    }

    /// Keeps `made` as the key that seals journals unless a host has kept one: of two
    /// hosts keeping one at once, the first written is the one both use.
    pub async fn keep_journal_seal_key(&self, made: &str) -> Result<()> {
        let q = &self.q.insert_secret;
        with_pool!(self.pool, p => sqlx::query(q.as_str())
            .bind(SEAL_KEY)
            .bind(made)
            .execute(p)
            .await
            .map(drop)?);
        Ok(())
    }

    /// The journals a run keeps, without their text.
    pub async fn run_journals(&self, run_id: &str) -> Result<Vec<JournalRecord>> {
        Ok(
            with_pool!(self.reader, p => sqlx::query_as(self.q.run_journals.as_str())
            .bind(run_id)
            .fetch_all(p)
            .await?),
        )
    }
}
