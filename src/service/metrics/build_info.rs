//! `ratelimitd_build_info`: 1, labelled with what the binary knows of its build, its version
//! (the package's). No commit is embedded in the build, so none is shown.

use super::family::{FamilyGroup, Spec};

const BUILD_INFO: Spec<'static> = Spec::gauge(
    "ratelimitd_build_info",
    "1, labelled with the version of ratelimitd running.",
    &["version"],
);

/// The version `ratelimitd_build_info` shows.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The collector of `ratelimitd_build_info`.
pub(super) fn group() -> prometheus::Result<FamilyGroup> {
    FamilyGroup::new(&[BUILD_INFO], || {
        let mut family = BUILD_INFO.family();
        family.sample(&[VERSION], 1);
        vec![family.done()]
    })
}
