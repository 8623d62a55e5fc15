//! A test's wrapper around a cluster writes only the calls it changes;
//! [`forward_cluster!`](crate::forward_cluster) forwards the others to its
//! `inner` cluster.

/// Forwards the named [`lockstep::cluster::Cluster`] methods to
/// `self.inner`, inside an `impl Cluster for Wrapper` block.
#[macro_export]
macro_rules! forward_cluster {
    // Every call but `apply`: the usual shape of a wrapper that watches or
    // refuses what is sent to the cluster.
    (all_but apply) => {
        $crate::forward_cluster!(all_but apply dry_run);
        $crate::forward_cluster!(dry_run);
    };
    // A wrapper that refuses as an admission webhook would: a dry run is
    // refused as the apply is.
    (all_but apply dry_run) => {
        $crate::forward_cluster!(
            load_record,
            applied_object,
            save_record,
            get,
            jobs,
            deployments,
            events,
            watch,
            delete_job,
            set_repair_record,
            record_event
        );
    };
    ($($m:ident),* $(,)?) => { $( $crate::forward_cluster!(@ $m); )* };
    (@ load_record) => {
        async fn load_record(
            &self,
            name: &str,
        ) -> Result<Option<String>, ::lockstep::cluster::ClusterError> {
            self.inner.load_record(name).await
        }
    };
    (@ applied_object) => {
        async fn applied_object(
            &self,
        ) -> Result<Option<::lockstep::kind::Key>, ::lockstep::cluster::ClusterError> {
            self.inner.applied_object().await
        }
    };
    (@ save_record) => {
        async fn save_record(
            &self,
            name: &str,
            text: &str,
            base: Option<&str>,
        ) -> Result<(), ::lockstep::cluster::ClusterError> {
            self.inner.save_record(name, text, base).await
        }
    };
    (@ get) => {
        async fn get(
            &self,
            key: &::lockstep::kind::Key,
        ) -> Result<Option<::lockstep::cluster::ClusterObject>, ::lockstep::cluster::ClusterError>
        {
            self.inner.get(key).await
        }
    };
    (@ apply) => {
        async fn apply(
            &self,
            req: &::lockstep::cluster::ApplyRequest,
        ) -> Result<::lockstep::cluster::ClusterObject, ::lockstep::cluster::ClusterError> {
            self.inner.apply(req).await
        }
    };
    (@ dry_run) => {
        async fn dry_run(
            &self,
            req: &::lockstep::cluster::ApplyRequest,
        ) -> Result<(), ::lockstep::cluster::ClusterError> {
            self.inner.dry_run(req).await
        }
    };
    (@ jobs) => {
        async fn jobs(
            &self,
            key: &::lockstep::kind::Key,
        ) -> Result<Vec<::lockstep::cluster::JobInfo>, ::lockstep::cluster::ClusterError> {
            self.inner.jobs(key).await
        }
    };
    (@ deployments) => {
        async fn deployments(
            &self,
            key: &::lockstep::kind::Key,
        ) -> Result<Vec<::lockstep::cluster::DeploymentInfo>, ::lockstep::cluster::ClusterError>
        {
            self.inner.deployments(key).await
        }
    };
    (@ events) => {
        async fn events(
            &self,
            key: &::lockstep::kind::Key,
        ) -> Result<Vec<::lockstep::cluster::EventInfo>, ::lockstep::cluster::ClusterError> {
            self.inner.events(key).await
        }
    };
    (@ watch) => {
        fn watch(&self) -> ::futures::stream::BoxStream<'static, ::lockstep::kind::Key> {
            self.inner.watch()
        }
    };
    (@ delete_job) => {
        async fn delete_job(
            &self,
            namespace: &str,
            name: &str,
            uid: Option<&str>,
        ) -> Result<bool, ::lockstep::cluster::ClusterError> {
            self.inner.delete_job(namespace, name, uid).await
        }
    };
    (@ set_repair_record) => {
        async fn set_repair_record(
            &self,
            key: &::lockstep::kind::Key,
            record: &str,
        ) -> Result<(), ::lockstep::cluster::ClusterError> {
            self.inner.set_repair_record(key, record).await
        }
    };
    (@ record_event) => {
        async fn record_event(
            &self,
            key: &::lockstep::kind::Key,
            reason: &str,
            message: &str,
            warning: bool,
        ) -> Result<(), ::lockstep::cluster::ClusterError> {
            self.inner.record_event(key, reason, message, warning).await
        }
    };
}
