//! Reading a row the same way on either backend: a record whose columns both drivers decode
//! into the same Rust types is read by one function over [`Columns`] (`audit::stored_event`,
//! `previews::Raw::read`, `connection::ConnectionRecord::read`), not by one per backend.
//! Each backend implements [`Columns`] for its row type in its `rows.rs`.

use crate::error::{StoreError, StoreResult};
use serde_json::Value;
use steward_core::Millis;

/// A Rust type both drivers decode a column into (text, 64-bit integers, booleans, and their
/// `Option`s: the types the schemas share).
pub(crate) trait Column:
    rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a>
{
}

impl<T> Column for T where T: rusqlite::types::FromSql + for<'a> tokio_postgres::types::FromSql<'a> {}

/// One row of a result, by column position.
pub(crate) trait Columns {
    /// Column `i` as `T`; a type mismatch or an unexpected NULL is `Corrupt`.
    fn get<T: Column>(&self, i: usize) -> StoreResult<T>;

    /// An integer column read as a narrower integer (a version, a count); out of range is
    /// `Corrupt`.
    fn int<T: TryFrom<i64>>(&self, i: usize) -> StoreResult<T> {
        let raw: i64 = self.get(i)?;
        T::try_from(raw).map_err(|_| StoreError::Corrupt(format!("integer out of range: {raw}")))
    }

    /// A time column (milliseconds).
    fn millis(&self, i: usize) -> StoreResult<Millis> {
        self.get(i).map(Millis)
    }

    /// An optional JSON document stored as text.
    fn json_opt(&self, i: usize, what: &str) -> StoreResult<Option<Value>> {
        self.get::<Option<String>>(i)?
            .map(|text| {
                serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
            })
            .transpose()
    }

    /// An id column, read with its type's parser.
    fn id<T, E: std::fmt::Display>(
        &self,
        i: usize,
        parse: fn(&str) -> Result<T, E>,
    ) -> StoreResult<T> {
        let text: String = self.get(i)?;
        parse(&text).map_err(|e| StoreError::Corrupt(format!("id: {e}")))
    }
}
