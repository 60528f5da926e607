//! The store wrapper every instance talks to: it injects seeded faults and records what each
//! call did to the store underneath, which is the ground truth the checker reads.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use idemkey_core::{
    Claim, ClaimRequest, Error, Record, RecordState, Result, Scope, Store, StoredResponse, TryClaim,
};

use crate::bugs::BugStore;
use crate::history::{Answer, Applied, Event, Exec, OpKind, Reply, Seen, SeenState};
use crate::world::{Executor, World, ms};

/// One call, as the history names it.
struct Call {
    op: OpKind,
    scope: Option<String>,
    claim: Option<Exec>,
}

/// What goes wrong with one call.
#[derive(Default)]
struct Plan {
    before: Duration,
    fail: bool,
    lose: Option<Reply>,
    after: Duration,
}

/// A faulty, observed store.
#[derive(Clone)]
pub(crate) struct SimStore {
    inner: BugStore,
    world: Arc<World>,
    instance: u8,
}

impl SimStore {
    pub(crate) fn new(inner: BugStore, world: Arc<World>, instance: u8) -> Self {
        Self {
            inner,
            world,
            instance,
        }
    }

    fn call(&self, op: OpKind, scope: Option<&Scope>, claim: Option<&Claim>) -> Call {
        Call {
            op,
            scope: scope.map(scope_name),
            claim: claim.map(|claim| self.world.exec_of(claim)),
        }
    }

    /// Runs `apply` with this call's faults, and records what it did.
    async fn run<T>(
        &self,
        call: Call,
        apply: impl Future<Output = Result<T>>,
        describe: impl FnOnce(&World, &T) -> Applied,
    ) -> Result<T> {
        self.gate(&call).await?;
        let plan = self.plan(call.op);
        tokio::time::sleep(plan.before).await;
        if plan.fail {
            self.log(call, Applied::NotApplied, Reply::Unavailable);
            return Err(Error::Unavailable(
                "injected: failed before applying".into(),
            ));
        }
        let result = apply.await;
        let applied = match &result {
            Ok(out) => describe(&self.world, out),
            Err(err) => Applied::Refused(err.to_string()),
        };
        let lost = plan.lose.filter(|_| result.is_ok());
        self.log(call, applied, lost.unwrap_or(Reply::Delivered));
        tokio::time::sleep(plan.after).await;
        match lost {
            Some(Reply::LostOutcomeUnknown) => Err(Error::OutcomeUnknown("injected".into())),
            Some(_) => Err(Error::Unavailable("injected: reply lost".into())),
            None => result,
        }
    }

    /// Holds back the calls of a paused executor, and drops those of a killed one.
    async fn gate(&self, call: &Call) -> Result<()> {
        let Some(exec) = call.claim else {
            return Ok(());
        };
        loop {
            match self.world.executor(exec) {
                Some(Executor::Dead) => std::future::pending::<()>().await,
                Some(Executor::Paused { until_ms }) => {
                    let left = until_ms.saturating_sub(self.world.clock.elapsed_ms());
                    tokio::time::sleep(Duration::from_millis(left.max(1))).await;
                }
                // A renewal after the handler answered can only come from the heartbeat's
                // unbiased `select!` picking its timer over its stop signal, both ready at
                // once: a coin toss outside the seed. Failing it before it reaches the store,
                // without drawing from the seed, makes both outcomes leave the same trace.
                Some(Executor::Finished) if call.op == OpKind::Extend => {
                    return Err(Error::Unavailable("the executor has stopped".into()));
                }
                _ => return Ok(()),
            }
        }
    }

    fn plan(&self, op: OpKind) -> Plan {
        let world = &self.world;
        if world.healing() {
            return Plan::default();
        }
        let faults = &world.config.faults;
        let mut plan = Plan::default();
        if world.chance(faults.slow) {
            plan.before = world.duration(Duration::ZERO, faults.max_delay);
            plan.after = world.duration(Duration::ZERO, faults.max_delay);
        }
        if op == OpKind::Extend && world.chance(faults.delay_heartbeat) {
            plan.before += world.duration(Duration::ZERO, world.config.lease);
        }
        plan.fail = world.chance(faults.fail);
        if op != OpKind::Lookup && world.chance(faults.lose_reply) {
            plan.lose = Some(if world.chance(0.5) {
                Reply::LostOutcomeUnknown
            } else {
                Reply::LostUnavailable
            });
        }
        plan
    }

    fn log(&self, call: Call, applied: Applied, reply: Reply) {
        self.world.log(Event::Store {
            instance: self.instance,
            op: call.op,
            scope: call.scope,
            claim: call.claim,
            applied,
            reply,
        });
    }
}

/// `actor/key`: the scope's name in the history (every request has the same operation).
pub(crate) fn scope_name(scope: &Scope) -> String {
    format!("{}/{}", scope.actor, scope.key.as_str())
}

fn seen(world: &World, record: &Record) -> Seen {
    let state = match &record.state {
        RecordState::InFlight { lease_remaining } => SeenState::InFlight {
            lease_left_ms: ms(*lease_remaining),
        },
        RecordState::Released => SeenState::Released,
        RecordState::Completed(response) => SeenState::Completed(answer(response)),
    };
    Seen {
        exec: world.exec(record.record_id, record.token),
        state,
    }
}

pub(crate) fn answer(response: &StoredResponse) -> Answer {
    Answer {
        status: response.status,
        body: String::from_utf8_lossy(&response.body).into_owned(),
    }
}

fn claimed(world: &World, claim: &Claim, again: bool) -> Applied {
    let (exec, lease_ms, retention_ms) =
        (world.exec_of(claim), ms(claim.lease), ms(claim.retention));
    if again {
        Applied::Reclaimed {
            exec,
            lease_ms,
            retention_ms,
        }
    } else {
        Applied::Claimed {
            exec,
            lease_ms,
            retention_ms,
        }
    }
}

fn settled(_: &World, (): &()) -> Applied {
    Applied::Settled { stored: None }
}

impl Store for SimStore {
    async fn lookup(&self, scope: &Scope) -> Result<Option<Record>> {
        let call = self.call(OpKind::Lookup, Some(scope), None);
        let read = |world: &World, found: &Option<Record>| {
            Applied::Read(found.as_ref().map(|record| seen(world, record)))
        };
        self.run(call, self.inner.lookup(scope), read).await
    }

    async fn try_claim(&self, request: &ClaimRequest) -> Result<TryClaim> {
        let call = self.call(OpKind::TryClaim, Some(&request.scope), None);
        let describe = |world: &World, tried: &TryClaim| match tried {
            TryClaim::Claimed(claim) => claimed(world, claim, false),
            TryClaim::Existing(record) => Applied::Read(Some(seen(world, record))),
        };
        self.run(call, self.inner.try_claim(request), describe)
            .await
    }

    async fn reclaim(&self, request: &ClaimRequest, record: &Record) -> Result<Option<Claim>> {
        let call = self.call(OpKind::Reclaim, Some(&request.scope), None);
        let describe = |world: &World, got: &Option<Claim>| match got {
            Some(claim) => claimed(world, claim, true),
            None => Applied::NotReclaimed,
        };
        self.run(call, self.inner.reclaim(request, record), describe)
            .await
    }

    async fn complete(&self, claim: &Claim, response: &StoredResponse) -> Result<()> {
        let call = self.call(OpKind::Complete, Some(&claim.scope), Some(claim));
        let stored = Some(answer(response));
        let describe = move |_: &World, (): &()| Applied::Settled { stored };
        self.run(call, self.inner.complete(claim, response), describe)
            .await
    }

    async fn release(&self, claim: &Claim) -> Result<()> {
        let call = self.call(OpKind::Release, Some(&claim.scope), Some(claim));
        self.run(call, self.inner.release(claim), settled).await
    }

    async fn discard(&self, claim: &Claim) -> Result<()> {
        let call = self.call(OpKind::Discard, Some(&claim.scope), Some(claim));
        self.run(call, self.inner.discard(claim), settled).await
    }

    async fn flush_claim(&self, claim: &Claim) -> Result<()> {
        self.inner.flush_claim(claim).await
    }

    async fn extend(&self, claim: &mut Claim) -> Result<()> {
        let call = self.call(OpKind::Extend, Some(&claim.scope), Some(claim));
        self.run(call, self.inner.extend(claim), settled).await
    }

    async fn forget(&self, scope: &Scope) -> Result<bool> {
        self.inner.forget(scope).await
    }

    async fn sweep(&self, batch: u32) -> Result<u64> {
        let call = self.call(OpKind::Sweep, None, None);
        let describe = |_: &World, swept: &u64| Applied::Swept(*swept);
        self.run(call, self.inner.sweep(batch), describe).await
    }

    async fn secret(&self) -> Result<std::sync::Arc<[u8]>> {
        self.inner.secret().await
    }
}
