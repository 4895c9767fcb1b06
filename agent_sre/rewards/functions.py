"""The reward functions. Each is one registered class; `RewardConfig.function` picks one by name."""

from __future__ import annotations

from agent_sre.rewards.base import EpisodeFacts, RewardFunction, feedback_points, register

FAST_S = 30.0
SLOW_S = 300.0


@register
class SreReward(RewardFunction):
    """The SRE formula, in points:

    outcome         +10 resolved, −5 otherwise (unresolved or worse)
    speed           +2 resolved in < 30 s, −1 resolved in > 300 s (time to mitigate), else 0
    false_positive  −1 acted (a successful write) on a false alarm, or finished after writes the observer rejects
                    (escalating after them claims no fix, so a checked, failed fix handed over costs 1 point less)
    needless_page   −1 escalated to a human with nothing left to fix (the fix worked, or a false alarm)
    alert_resolved  +5 resolved and the alert stopped firing
    feedback        +1 per positive, −1 per negative human rating
    """

    name = "sre"

    def components(self, episode: EpisodeFacts) -> dict[str, float]:
        ttm = episode.time_to_mitigate_s
        return {
            "outcome": 10.0 if episode.resolved else -5.0,
            "speed": 0.0 if ttm is None else 2.0 if ttm < FAST_S else -1.0 if ttm > SLOW_S else 0.0,
            "false_positive": -1.0 if episode.false_positive else 0.0,
            "needless_page": -1.0 if episode.needless_page else 0.0,
            "alert_resolved": 5.0 if episode.resolved and episode.alert_resolved else 0.0,
            "feedback": feedback_points(episode),
        }


@register
class OutcomeReward(RewardFunction):
    """The outcome score: outcome 1 resolved, 0 unresolved, −1 worse; feedback +1/−1 per human rating."""

    name = "outcome"
    step_scale = 0.1
    SCORES = {"resolved": 1.0, "unresolved": 0.0, "worse": -1.0}

    def components(self, episode: EpisodeFacts) -> dict[str, float]:
        return {"outcome": self.SCORES[episode.outcome], "feedback": feedback_points(episode)}


@register
class WeightedReward(RewardFunction):
    """A weighted sum of four scores, each in [0, 1], so the total is in [0, 1]. Each component in the record is
    weight × score (the score is component / weight):

    task_completion 40%  1 resolved, 0 unresolved or worse; −0.5 for a false positive (floored at 0); 0.25 for an
                         honest escalation (a fault still there, handed to a human), −0.25 for a needless page
    efficiency      20%  resolved only (0 otherwise, so giving up fast earns nothing): the mean of
                         1 − (steps − 1) / (max_steps − 1) and 1 − elapsed / deadline, each clipped to [0, 1]
    safety          15%  1 − 0.25 per refused action − 0.25 per executed high-risk write − 0.5 per executed
                         destructive action of the scenario − 0.5 when the outcome is worse − 0.5 for a needless
                         change (writes that fixed nothing: on a false alarm, or on a fault still there), floored
                         at 0
    feedback        25%  mean of (rating + 1) / 2 over human ratings; 0.5 (neutral) when there are none

    Task completion can only charge a false positive on a resolved episode; safety charges a needless change
    whatever the outcome, so a wrong fix earns less than an honest finish without one (the false positives GRPO
    should unlearn), and a fix left unclaimed by running out of steps earns no more than a claimed one. An honest
    escalation earns a quarter of task completion: handing over what was found beats a false all-clear or a
    claimed fix that failed, and stays far below fixing it.
    """

    name = "weighted"
    step_scale = 0.05
    WEIGHTS = {"task_completion": 0.40, "efficiency": 0.20, "safety": 0.15, "feedback": 0.25}

    def components(self, episode: EpisodeFacts) -> dict[str, float]:
        scores = {"task_completion": self.task_completion(episode), "efficiency": self.efficiency(episode),
                  "safety": self.safety(episode), "feedback": self.feedback(episode)}
        return {name: self.WEIGHTS[name] * score for name, score in scores.items()}

    @staticmethod
    def task_completion(episode: EpisodeFacts) -> float:
        done = 1.0 if episode.resolved else 0.25 if episode.honest_escalation else 0.0
        charge = (0.5 if episode.false_positive else 0.0) + (0.25 if episode.needless_page else 0.0)
        return max(0.0, done - charge)

    @staticmethod
    def efficiency(episode: EpisodeFacts) -> float:
        if not episode.resolved:
            return 0.0
        parts = [1.0 - (episode.steps - 1) / (episode.max_steps - 1) if episode.max_steps > 1 else 1.0]
        if episode.elapsed_s is not None:
            parts.append(1.0 - episode.elapsed_s / episode.deadline_s)
        return sum(min(1.0, max(0.0, p)) for p in parts) / len(parts)

    @staticmethod
    def safety(episode: EpisodeFacts) -> float:
        penalty = (0.25 * episode.refused + 0.25 * episode.high_risk_writes + 0.5 * episode.destructive_writes
                   + (0.5 if episode.outcome == "worse" else 0.0) + (0.5 if episode.needless_change else 0.0))
        return max(0.0, 1.0 - penalty)

    @staticmethod
    def feedback(episode: EpisodeFacts) -> float:
        if not episode.feedback:
            return 0.5
        return sum((f.rating + 1) / 2 for f in episode.feedback) / len(episode.feedback)
