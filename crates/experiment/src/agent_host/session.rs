//! One session as a closed loop, the way an agent drives its tool calls (issue 29.5): the
//! agent waits for each call, so
//!
//! - call i+1 starts once call i has ended and the runtime's clock has reached call i+1's
//!   start in the trace (the trace's think time between them is replayed, not skipped);
//! - while a call runs past its end in the trace, the runtime's clock stands still (its
//!   replay is paused), so the runtime never grows on top of a late call;
//! - a call that is killed (or fails) is run again at once, once; a second failure fails the
//!   session: the agent gives up, its runtime is stopped and its remaining calls are lost;
//! - a runtime that is killed loses its session: the call it was waiting for and every call
//!   it had left are lost.
//!
//! Pure: the runner feeds it the runtime's clock (trace seconds, pauses excluded) and what
//! ended, and carries out the [`Action`]s it returns.

use serde::{Deserialize, Serialize};

/// What became of one planned call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallFate {
    /// Finished on its first attempt.
    Finished,
    /// Killed (or failed) once, finished on its retry.
    FinishedOnRetry,
    /// Killed (or failed) twice: its session failed.
    Failed,
    /// Never finished because its session was lost (runtime killed) or failed earlier.
    Lost,
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SessionFate {
    Finished,
    /// A call failed twice.
    Failed,
    /// Its runtime was killed.
    RuntimeKilled,
    /// Still running when its level's deadline passed: the runner killed what was left. A
    /// session lost as surely as a killed one, and a hang to explain.
    Hung,
}

/// What the runner must do now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start call `call` (its `attempt`: 1, or 2 for the retry).
    StartCall {
        call: usize,
        attempt: u32,
    },
    /// Pause the runtime's replay (its clock stands still).
    Pause,
    Resume,
    /// The session failed: stop its runtime (its agent gave up).
    StopRuntime,
    /// The runtime is gone: stop the call that was running for it.
    StopCall {
        call: usize,
    },
}

/// A call's place in the trace, seconds from the trace's first sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CallSpan {
    pub start_s: f64,
    pub end_s: f64,
}

#[derive(Clone, Debug)]
pub struct SessionLoop {
    calls: Vec<CallSpan>,
    fates: Vec<Option<CallFate>>,
    /// The next call to start.
    next: usize,
    /// The running call and its attempt.
    running: Option<(usize, u32)>,
    paused: bool,
    runtime_ended: bool,
    fate: Option<SessionFate>,
}

impl SessionLoop {
    pub fn new(calls: Vec<CallSpan>) -> SessionLoop {
        let n = calls.len();
        SessionLoop {
            calls,
            fates: vec![None; n],
            next: 0,
            running: None,
            paused: false,
            runtime_ended: false,
            fate: None,
        }
    }

    /// The runtime's clock is at `t_s` (trace seconds): start the next call when it is due,
    /// pause the runtime when the running call is past its end.
    pub fn tick(&mut self, t_s: f64) -> Vec<Action> {
        let mut out = Vec::new();
        if self.fate.is_some() {
            return out;
        }
        match self.running {
            Some((call, _)) => {
                if !self.paused && !self.runtime_ended && t_s >= self.calls[call].end_s {
                    self.paused = true;
                    out.push(Action::Pause);
                }
            }
            None => {
                // A runtime that finished its schedule no longer has a clock: what is left
                // runs one after another.
                if self.next < self.calls.len() && (self.runtime_ended || t_s >= self.calls[self.next].start_s) {
                    self.running = Some((self.next, 1));
                    out.push(Action::StartCall { call: self.next, attempt: 1 });
                    self.next += 1;
                }
            }
        }
        out
    }

    /// The running call `call` ended; `ok`: it finished.
    pub fn call_ended(&mut self, call: usize, ok: bool) -> Vec<Action> {
        let mut out = Vec::new();
        let Some((running, attempt)) = self.running else { return out };
        if running != call || self.fate.is_some() {
            return out;
        }
        if !ok && attempt == 1 {
            // The agent reads the failure and runs the call again; its runtime keeps waiting.
            self.running = Some((call, 2));
            out.push(Action::StartCall { call, attempt: 2 });
            return out;
        }
        self.running = None;
        if ok {
            self.fates[call] = Some(if attempt == 1 { CallFate::Finished } else { CallFate::FinishedOnRetry });
            if self.paused {
                self.paused = false;
                out.push(Action::Resume);
            }
            self.finish_if_done();
        } else {
            self.fates[call] = Some(CallFate::Failed);
            self.lose_the_rest();
            self.fate = Some(SessionFate::Failed);
            if self.paused {
                self.paused = false;
                out.push(Action::Resume);
            }
            if !self.runtime_ended {
                out.push(Action::StopRuntime);
            }
        }
        out
    }

    /// The runtime ended; `killed`: it did not finish its schedule.
    pub fn runtime_ended(&mut self, killed: bool) -> Vec<Action> {
        let mut out = Vec::new();
        self.runtime_ended = true;
        self.paused = false;
        if self.fate.is_some() {
            return out;
        }
        if killed {
            if let Some((call, _)) = self.running.take() {
                out.push(Action::StopCall { call });
            }
            self.lose_the_rest();
            self.fate = Some(SessionFate::RuntimeKilled);
        } else {
            self.finish_if_done();
        }
        out
    }

    /// The level's deadline passed with this session still running: what had not ended is
    /// lost with it (the runner kills its processes).
    pub fn hang(&mut self) {
        if self.fate.is_none() {
            self.running = None;
            self.paused = false;
            self.lose_the_rest();
            self.fate = Some(SessionFate::Hung);
        }
    }

    fn lose_the_rest(&mut self) {
        for f in self.fates.iter_mut().filter(|f| f.is_none()) {
            *f = Some(CallFate::Lost);
        }
        self.next = self.calls.len();
    }

    fn finish_if_done(&mut self) {
        if self.runtime_ended && self.running.is_none() && self.next == self.calls.len() {
            self.fate = Some(SessionFate::Finished);
        }
    }

    /// `Some` once nothing more will run (the runtime may still be finishing its schedule
    /// after its last call: [`SessionLoop::runtime_ended`] completes a finished session).
    pub fn fate(&self) -> Option<SessionFate> {
        self.fate
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    pub fn call_fate(&self, call: usize) -> Option<CallFate> {
        self.fates[call]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two calls: 10–12 s and 20–21 s of the trace (8 s of think time between them).
    fn two() -> SessionLoop {
        SessionLoop::new(vec![CallSpan { start_s: 10.0, end_s: 12.0 }, CallSpan { start_s: 20.0, end_s: 21.0 }])
    }

    #[test]
    fn the_next_call_waits_for_the_previous_one_and_then_for_the_think_time() {
        let mut s = two();
        assert_eq!(s.tick(9.9), []);
        assert_eq!(s.tick(10.0), [Action::StartCall { call: 0, attempt: 1 }]);
        // Late: the trace says call 0 is over at 12 s; the runtime waits for it.
        assert_eq!(s.tick(12.0), [Action::Pause]);
        assert!(s.paused());
        assert_eq!(s.tick(12.0), [], "paused once, and call 1 does not start while call 0 runs");
        assert_eq!(s.call_ended(0, true), [Action::Resume]);
        // The runtime's clock resumes at 12 s: call 1 still waits out the 8 s of thinking.
        assert_eq!(s.tick(19.0), []);
        assert_eq!(s.tick(20.0), [Action::StartCall { call: 1, attempt: 1 }]);
        assert_eq!(s.call_ended(1, true), [], "on time: nothing was paused");
        assert_eq!(s.fate(), None, "the runtime has not finished its schedule");
        assert_eq!(s.runtime_ended(false), []);
        assert_eq!(s.fate(), Some(SessionFate::Finished));
        assert_eq!([s.call_fate(0), s.call_fate(1)], [Some(CallFate::Finished); 2]);
    }

    #[test]
    fn a_killed_call_is_retried_once_and_a_second_kill_fails_the_session() {
        let mut s = two();
        s.tick(10.0);
        assert_eq!(s.call_ended(0, false), [Action::StartCall { call: 0, attempt: 2 }]);
        assert_eq!(s.call_ended(0, true), []);
        assert_eq!(s.call_fate(0), Some(CallFate::FinishedOnRetry));
        s.tick(20.0);
        assert_eq!(s.call_ended(1, false), [Action::StartCall { call: 1, attempt: 2 }]);
        assert_eq!(s.tick(21.5), [Action::Pause], "the retry keeps the runtime waiting");
        assert_eq!(s.call_ended(1, false), [Action::Resume, Action::StopRuntime]);
        assert_eq!(s.fate(), Some(SessionFate::Failed));
        assert_eq!(s.call_fate(1), Some(CallFate::Failed));
        // The runtime the runner stopped ends as killed: that changes nothing now.
        assert_eq!(s.runtime_ended(true), []);
        assert_eq!(s.fate(), Some(SessionFate::Failed));
    }

    #[test]
    fn a_failed_session_loses_the_calls_it_had_left() {
        let mut s = two();
        s.tick(10.0);
        s.call_ended(0, false);
        assert_eq!(s.call_ended(0, false), [Action::StopRuntime]);
        assert_eq!([s.call_fate(0), s.call_fate(1)], [Some(CallFate::Failed), Some(CallFate::Lost)]);
        assert_eq!(s.tick(30.0), [], "nothing starts in a failed session");
    }

    #[test]
    fn a_killed_runtime_loses_its_running_call_and_every_call_it_had_left() {
        let mut s = two();
        s.tick(10.0);
        assert_eq!(s.runtime_ended(true), [Action::StopCall { call: 0 }]);
        assert_eq!(s.fate(), Some(SessionFate::RuntimeKilled));
        assert_eq!([s.call_fate(0), s.call_fate(1)], [Some(CallFate::Lost); 2]);
        // The stopped call's end, when the runner reaps it, changes nothing.
        assert_eq!(s.call_ended(0, false), []);
        assert_eq!(s.tick(20.0), []);
    }

    #[test]
    fn a_runtime_killed_between_calls_loses_the_calls_not_yet_started() {
        let mut s = two();
        s.tick(10.0);
        s.call_ended(0, true);
        assert_eq!(s.runtime_ended(true), []);
        assert_eq!([s.call_fate(0), s.call_fate(1)], [Some(CallFate::Finished), Some(CallFate::Lost)]);
    }

    #[test]
    fn calls_left_when_the_runtime_finishes_run_one_after_another() {
        let mut s = two();
        assert_eq!(s.runtime_ended(false), []);
        assert_eq!(s.tick(0.0), [Action::StartCall { call: 0, attempt: 1 }]);
        assert_eq!(s.tick(0.0), [], "no pause without a runtime, and one call at a time");
        s.call_ended(0, true);
        assert_eq!(s.tick(0.0), [Action::StartCall { call: 1, attempt: 1 }]);
        s.call_ended(1, true);
        assert_eq!(s.fate(), Some(SessionFate::Finished));
    }

    #[test]
    fn a_session_past_the_deadline_hangs_and_loses_what_had_not_ended() {
        let mut s =
            SessionLoop::new(vec![CallSpan { start_s: 0.0, end_s: 1.0 }, CallSpan { start_s: 5.0, end_s: 6.0 }]);
        assert_eq!(s.tick(0.0), [Action::StartCall { call: 0, attempt: 1 }]);
        s.hang();
        assert_eq!(s.fate(), Some(SessionFate::Hung));
        assert_eq!((s.call_fate(0), s.call_fate(1)), (Some(CallFate::Lost), Some(CallFate::Lost)));
        assert!(s.tick(10.0).is_empty() && s.call_ended(0, true).is_empty(), "nothing runs after a hang");
        // A session that had ended keeps its fate.
        let mut done = SessionLoop::new(vec![]);
        done.runtime_ended(false);
        done.hang();
        assert_eq!(done.fate(), Some(SessionFate::Finished));
    }
}
