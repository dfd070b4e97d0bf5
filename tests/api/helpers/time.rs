//! Time in tests: the wall clock as Unix seconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in Unix seconds (as the server and the book store times).
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}
