//! What the command line configures: the deployment to reach ([`topology`]) and how startup
//! waits for it ([`startup`]).

pub(super) mod startup;
pub mod topology;
