//! Reading the config file again, and the plugin files of parked flows, while running.

use std::sync::Arc;
use std::time::Instant;

use super::{modified, Backoff, Membership, State, Supervisor, Then, CONFIG_CHANGED};
use crate::config::Config;
use crate::events::{ConfigReloadRefused, ConfigReloaded};

impl Supervisor {
    /// Parked flows whose plugin file changed start again; a changed config file is reloaded.
    pub(super) fn check_files(&mut self) {
        let changed: Vec<String> = self
            .flows
            .iter()
            .filter(
                |(_, f)| matches!(&f.state, State::Parked { plugin: Some((path, at)), .. } if modified(path) != *at),
            )
            .map(|(n, _)| n.clone())
            .collect();
        for name in changed {
            tracing::info!(flow = name, "the plugin of a parked flow changed; starting it again");
            self.start(&name);
        }
        if let Some(path) = &self.options.config_path {
            let now = modified(path);
            if now.is_some() && now != self.config_modified {
                self.reload();
            }
        }
    }

    /// Reads the config file again and applies the difference, flow by flow.
    pub(super) fn reload(&mut self) {
        let Some(path) = self.options.config_path.clone() else { return };
        self.config_modified = modified(&path);
        let shown = path.display().to_string();
        let new = match Config::from_file(&path) {
            Ok(mut c) => {
                if self.options.instance_id.is_some() {
                    c.group_instance_id = self.options.instance_id.clone();
                }
                c
            }
            Err(e) => {
                ConfigReloadRefused { path: &shown, reason: &e.to_string() }.emit();
                return;
            }
        };
        for warning in &new.warnings {
            tracing::warn!("{shown}: {warning}");
        }
        if new.stage_threads != self.config.stage_threads || new.metrics_listen != self.config.metrics_listen {
            tracing::warn!(
                path = shown,
                "`strait.stage.threads` and `strait.metrics.listen` take effect at the next start of the process"
            );
        }
        let new = Arc::new(new);
        let deadline = Instant::now() + new.shutdown_timeout;
        let (mut added, mut removed, mut changed) = (0, 0, 0);
        let gone: Vec<String> =
            self.flows.keys().filter(|n| !new.flows.iter().any(|f| &f.name() == *n)).cloned().collect();
        let old_config = std::mem::replace(&mut self.config, new.clone());
        for name in gone {
            removed += 1;
            self.stop(&name, deadline, Then::Remove);
        }
        for flow in &new.flows {
            let name = flow.name();
            let fingerprint = flow.fingerprint(&new);
            match self.flows.get_mut(&name) {
                None => {
                    added += 1;
                    self.add(flow.clone());
                }
                Some(f) if f.fingerprint != fingerprint || f.then == Then::Remove => {
                    changed += 1;
                    f.config = flow.clone();
                    f.fingerprint = fingerprint;
                    f.backoff = Backoff::default();
                    // A member with the new settings joins the flow's group, where it copies
                    // nothing until the old one left (once the flow stopped), and the flow
                    // starts again once the group says which tasks are ours.
                    if let Some(old) =
                        f.membership.replace(Membership::start(&new, flow, self.group.0.clone(), new.shutdown_timeout))
                    {
                        old.retire();
                        if f.state.active() {
                            // Left once the flow stopped, or its last positions would be refused.
                            f.retiring.push(old);
                        } else {
                            old.leave();
                            self.leaving.push(old);
                        }
                    }
                    f.tasks = None;
                    if f.state.active() {
                        self.stop(&name, deadline, Then::Restart(CONFIG_CHANGED));
                    } else {
                        // It starts once the new group says which tasks it runs; until then a
                        // parked flow is parked no more, so the process does not end over it.
                        self.set_state(&name, State::Starting, "joining the flow's group with its new settings");
                    }
                }
                Some(_) => {}
            }
        }
        drop(old_config);
        ConfigReloaded { path: &shown, added, removed, changed }.emit();
    }
}
