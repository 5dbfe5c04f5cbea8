//! The pure domain: descriptor matching, hit counting, decisions and algorithm math.
//! Nothing here knows about gRPC, Redis or YAML.

pub mod algorithm;
pub mod check;
pub mod clock;
pub mod consistency;
pub mod counter_key;
pub mod counter_state;
pub mod matcher;
pub mod metadata;
pub mod plan;
pub mod quota;
pub mod rate;
pub mod request;
pub mod request_bounds;
pub mod rules;
pub mod wildcard;

pub use clock::{Clock, ManualClock, MonotonicClock, SystemClock};
pub use consistency::Consistency;
pub use metadata::{Metadata, MetadataValue};
pub use plan::{
    outcome, plan, plan_with, response_metadata, Code, CurrentLimit, DescriptorOutcome,
    Enforcement, Modes, Outcome, Plan, PlanError, Resolution, ResponseMetadata,
};
pub use rate::{Algorithm, Rate, RateError, Unit};
pub use request::{Descriptor, Entry, LimitOverride, Request};
pub use request_bounds::{BoundExceeded, RequestBound, RequestBounds};
pub use rules::{
    ConfiguredLimit, DomainRules, LimitKind, LimitedRate, RuleNode, RuleSet, Rules, WildcardRule,
};
pub use wildcard::Wildcard;
