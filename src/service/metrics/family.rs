//! Metric families as the collectors build them at scrape time, and the collector every family
//! group of `/metrics` is: its families described once, read when scraped.

use prometheus::core::{Collector, Desc};
use prometheus::proto::{self, LabelPair, Metric, MetricFamily, MetricType};

/// A family's name, help, type and label names: what the registry is told at registration and
/// what each scrape's samples are built from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spec<'a> {
    pub name: &'a str,
    pub help: &'a str,
    pub kind: MetricType,
    pub labels: &'a [&'a str],
}

impl<'a> Spec<'a> {
    pub(crate) const fn counter(name: &'a str, help: &'a str, labels: &'a [&'a str]) -> Spec<'a> {
        Spec {
            name,
            help,
            kind: MetricType::COUNTER,
            labels,
        }
    }

    pub(crate) const fn gauge(name: &'a str, help: &'a str, labels: &'a [&'a str]) -> Spec<'a> {
        Spec {
            name,
            help,
            kind: MetricType::GAUGE,
            labels,
        }
    }

    pub(crate) const fn histogram(name: &'a str, help: &'a str) -> Spec<'a> {
        Spec {
            name,
            help,
            kind: MetricType::HISTOGRAM,
            labels: &[],
        }
    }

    /// The registry's description; a name or label name that Prometheus does not accept is a
    /// programming error, which registration reports.
    pub(crate) fn desc(&self) -> prometheus::Result<Desc> {
        Desc::new(
            self.name.to_owned(),
            self.help.to_owned(),
            self.labels
                .iter()
                .map(|label| (*label).to_owned())
                .collect(),
            Default::default(),
        )
    }

    /// An empty family of this spec (a counter or a gauge), to add samples to.
    pub(crate) fn family(self) -> Family<'a> {
        let mut family = MetricFamily::default();
        family.set_name(self.name.to_owned());
        family.set_help(self.help.to_owned());
        family.set_field_type(self.kind);
        Family { spec: self, family }
    }

    /// The family of one unlabelled sample.
    pub(crate) fn single(self, value: u64) -> MetricFamily {
        let mut family = self.family();
        family.sample(&[], value);
        family.done()
    }

    /// A histogram family of one unlabelled series: `buckets` (upper bound, cumulative count);
    /// the text encoder writes each `le` in the bound's shortest decimal form and adds `+Inf`.
    pub(crate) fn histogram_of(
        self,
        buckets: impl Iterator<Item = (f64, u64)>,
        count: u64,
        sum: f64,
    ) -> MetricFamily {
        let mut histogram = proto::Histogram::default();
        histogram.set_bucket(
            buckets
                .map(|(bound, cumulative)| {
                    let mut bucket = proto::Bucket::default();
                    bucket.set_upper_bound(bound);
                    bucket.set_cumulative_count(cumulative);
                    bucket
                })
                .collect(),
        );
        histogram.set_sample_count(count);
        histogram.set_sample_sum(sum);
        let mut metric = Metric::default();
        metric.set_histogram(histogram);
        let mut family = self.family();
        family.family.mut_metric().push(metric);
        family.done()
    }
}

/// A counter or gauge family being filled with samples.
pub(crate) struct Family<'a> {
    spec: Spec<'a>,
    family: MetricFamily,
}

impl Family<'_> {
    /// Adds a sample whose label values are `values`, in the order of the spec's label names.
    pub(crate) fn sample(&mut self, values: &[&str], value: u64) -> &mut Self {
        let labels = self
            .spec
            .labels
            .iter()
            .zip(values)
            .map(|(name, value)| {
                let mut pair = LabelPair::default();
                pair.set_name((*name).to_owned());
                pair.set_value((*value).to_owned());
                pair
            })
            .collect();
        let mut metric = Metric::from_label(labels);
        if self.spec.kind == MetricType::GAUGE {
            let mut gauge = proto::Gauge::default();
            gauge.set_value(value as f64);
            metric.set_gauge(gauge);
        } else {
            let mut counter = proto::Counter::default();
            counter.set_value(value as f64);
            metric.set_counter(counter);
        }
        self.family.mut_metric().push(metric);
        self
    }

    /// The family with the samples added (the registry leaves out one without any).
    pub(crate) fn done(self) -> MetricFamily {
        self.family
    }
}

type Collect = Box<dyn Fn() -> Vec<MetricFamily> + Send + Sync>;

/// A collector of a group of families read together when scraped (one snapshot for all of
/// them), described by their specs.
pub(crate) struct FamilyGroup {
    descs: Vec<Desc>,
    collect: Collect,
}

impl FamilyGroup {
    pub(crate) fn new(
        specs: &[Spec<'_>],
        collect: impl Fn() -> Vec<MetricFamily> + Send + Sync + 'static,
    ) -> prometheus::Result<FamilyGroup> {
        Ok(FamilyGroup {
            descs: specs.iter().map(Spec::desc).collect::<Result<_, _>>()?,
            collect: Box::new(collect),
        })
    }

    /// The families it describes, by name.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.descs.iter().map(|desc| desc.fq_name.as_str())
    }

    /// A collector describing the same families, which the registry takes for this one when
    /// unregistering.
    pub(crate) fn stand_in(&self) -> FamilyGroup {
        FamilyGroup {
            descs: self.descs.clone(),
            collect: Box::new(Vec::new),
        }
    }
}

impl Collector for FamilyGroup {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        (self.collect)()
    }
}
