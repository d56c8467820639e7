//! Enables crash reporting at app launch and uploads pending reports on the next launch.

pub mod app;
pub mod store;
pub mod upload;
