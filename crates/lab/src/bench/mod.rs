//! `memqos bench`: figures with medians and spread, never pass/fail.

pub mod churn;
pub mod reaction;
pub mod run;
pub mod stats;
