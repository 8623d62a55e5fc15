//! The live state of the cluster as the gate sees it: per object, the status
//! fields the operators write (contract §3). Read from what
//! `kubectl get <kinds> -A -o yaml` prints (a `v1 List`), or from a stream of
//! documents; the cluster module fills the same type from the API server.

use std::collections::HashMap;

use serde::Deserialize;
use thiserror::Error;

use crate::kind::{Key, Kind, Recognised};

/// One object's release status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LiveStatus {
    pub installed_release: Option<String>,
    pub target_release: Option<String>,
    pub upgrade_phase: Option<String>,
    pub installed_image: Option<String>,
    pub generation: Option<i64>,
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub observed_generation: Option<i64>,
}

impl LiveStatus {
    /// The release an upgrade in flight is heading to, if one is.
    /// Phase-machine kinds show `upgradePhase`; Placement and Barbican only
    /// stamp `targetRelease` while their gated sync runs.
    pub fn in_flight_target(&self) -> Option<&str> {
        self.target_release.as_deref().filter(|t| !t.is_empty())
    }

    pub fn phase(&self) -> Option<&str> {
        self.upgrade_phase.as_deref().filter(|p| !p.is_empty())
    }

    pub fn installed(&self) -> Option<&str> {
        self.installed_release.as_deref().filter(|p| !p.is_empty())
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }
}

/// The whole live snapshot.
#[derive(Clone, Debug, Default)]
pub struct Live {
    pub objects: HashMap<Key, LiveStatus>,
}

impl Live {
    pub fn get(&self, key: &Key) -> Option<&LiveStatus> {
        self.objects.get(key)
    }
}

#[derive(Debug, Error)]
pub enum LiveError {
    #[error("{file}: does not parse as YAML or JSON: {message}")]
    Parse { file: String, message: String },
    #[error("{file}: item {index} ({kind}): {message}")]
    Item {
        file: String,
        index: usize,
        kind: String,
        message: String,
    },
}

#[derive(Deserialize)]
struct RawObject {
    #[serde(default)]
    metadata: RawMeta,
    #[serde(default)]
    status: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct RawMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    #[serde(default)]
    installed_release: Option<String>,
    #[serde(default)]
    target_release: Option<String>,
    #[serde(default)]
    upgrade_phase: Option<String>,
    #[serde(default)]
    installed_image: Option<String>,
    #[serde(default)]
    conditions: Vec<Condition>,
}

/// Parses `kubectl get -o yaml|json` output: a `List` (or several), or a
/// stream of objects. Kinds that are not ours are ignored; a status of an
/// unexpected shape is an error naming the item, never a panic.
pub fn parse_live(file: &str, text: &str) -> Result<Live, LiveError> {
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple_with_options(
        text,
        serde_saphyr::options! { with_snippet: false, strict_booleans: true },
    )
    .map_err(|e| LiveError::Parse {
        file: file.to_owned(),
        message: e.to_string().lines().next().unwrap_or_default().to_owned(),
    })?;
    let mut live = Live::default();
    let mut index = 0usize;
    for doc in docs {
        add_value(file, doc, &mut live, &mut index)?;
    }
    Ok(live)
}

fn add_value(
    file: &str,
    value: serde_json::Value,
    live: &mut Live,
    index: &mut usize,
) -> Result<(), LiveError> {
    let this = *index;
    *index += 1;
    if let Some(serde_json::Value::Array(items)) = value.get("items") {
        for item in items.clone() {
            add_value(file, item, live, index)?;
        }
        return Ok(());
    }
    // Look at apiVersion and kind first: objects that are not ours may have
    // any shape at all and must not fail the snapshot.
    let text = |k: &str| value.get(k).and_then(|v| v.as_str()).unwrap_or_default();
    let Some(Recognised::Ours(kind)) = Kind::recognise(text("apiVersion"), text("kind")) else {
        return Ok(());
    };
    let raw: RawObject = serde_json::from_value(value).map_err(|e| LiveError::Item {
        file: file.to_owned(),
        index: this,
        kind: kind.to_string(),
        message: e.to_string(),
    })?;
    let status: RawStatus = match raw.status {
        None | Some(serde_json::Value::Null) => RawStatus::default(),
        Some(v) => serde_json::from_value(v).map_err(|e| LiveError::Item {
            file: file.to_owned(),
            index: this,
            kind: format!("{kind} {}", raw.metadata.name),
            message: format!("status: {e}"),
        })?,
    };
    let key = Key::new(
        kind,
        raw.metadata.namespace.unwrap_or_else(|| "default".into()),
        raw.metadata.name,
    );
    live.objects.insert(
        key,
        LiveStatus {
            installed_release: status.installed_release,
            target_release: status.target_release,
            upgrade_phase: status.upgrade_phase,
            installed_image: status.installed_image,
            generation: raw.metadata.generation,
            conditions: status.conditions,
        },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_kubectl_list() {
        let text = r#"apiVersion: v1
kind: List
items:
- apiVersion: nova.openstack.c5c3.io/v1alpha1
  kind: Nova
  metadata: {name: nova, namespace: compute, generation: 4}
  status:
    installedRelease: "2026.1"
    targetRelease: "2026.2"
    upgradePhase: Migrating
    conditions:
    - {type: Ready, status: "False", reason: NotAllReady, observedGeneration: 4}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: x, namespace: y}
- apiVersion: glance.openstack.c5c3.io/v1alpha1
  kind: Glance
  metadata: {name: g, namespace: image}
metadata: {resourceVersion: ""}
"#;
        let live = parse_live("live.yaml", text).unwrap();
        assert_eq!(live.objects.len(), 2);
        let n = live.get(&Key::new(Kind::Nova, "compute", "nova")).unwrap();
        assert_eq!(n.in_flight_target(), Some("2026.2"));
        assert_eq!(n.phase(), Some("Migrating"));
        assert_eq!(n.condition("Ready").unwrap().observed_generation, Some(4));
        let g = live.get(&Key::new(Kind::Glance, "image", "g")).unwrap();
        assert_eq!(g.in_flight_target(), None);
    }

    #[test]
    fn odd_status_is_an_error_not_a_panic() {
        let text = "apiVersion: glance.openstack.c5c3.io/v1alpha1\nkind: Glance\nmetadata: {name: g}\nstatus: {conditions: 7}\n";
        let err = parse_live("l.yaml", text).unwrap_err().to_string();
        assert!(err.contains("Glance g"), "{err}");
        assert!(parse_live("l.yaml", "a: [").is_err());
    }
}
