//! `ListMetricDescriptors`: the cadvisor metrics berth serves.

use cri_api::v1::ListMetricDescriptorsResponse;

use super::cadvisor_metrics::descriptors;
use super::CriService;

impl CriService {
    pub(super) fn serve_list_metric_descriptors(&self) -> ListMetricDescriptorsResponse {
        ListMetricDescriptorsResponse {
            descriptors: descriptors(),
        }
    }
}
