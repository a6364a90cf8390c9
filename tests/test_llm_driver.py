"""The one LLM job driver (cuvee.llm.driver): concurrency bound, delivery order, and what an error stops. The
backend is a scripted implementation of the Backend protocol whose calls finish in an order the test sets with
events (no sleeps); every wait has a timeout, so a driver that deadlocks fails instead of hanging."""

import threading

from cuvee.llm.backend import Completion, ResponseError
from cuvee.llm.driver import LOOKAHEAD, Tally, drive

WAIT_S = 20


class Scripted:
    """Answers prompt p with "answer p"; prompt "0" is held until ``release`` is set or ``hold_until`` prompts
    were asked for; counts calls in flight."""

    api, name, max_new_tokens, batch_size = "local", "scripted", 8, 1

    def __init__(self, concurrency: int, fail: dict | None = None, hold_until: int | None = None):
        self.concurrency = concurrency
        self.fail = fail or {}
        self.hold_until = hold_until
        self.release = threading.Event()
        self.lock = threading.Condition()
        self.inflight = self.most = 0
        self.asked: list[str] = []

    def complete_many(self, prompts):
        with self.lock:
            self.inflight += 1
            self.most = max(self.most, self.inflight)
            self.asked += prompts
            self.lock.notify_all()
        try:
            if prompts == ["0"] and self.hold_until is not None:
                with self.lock:
                    assert self.lock.wait_for(lambda: len(self.asked) >= self.hold_until, WAIT_S), "never asked enough"
            elif prompts == ["0"]:
                assert self.release.wait(WAIT_S), "the held call was never released"
            if prompts[0] in self.fail:
                raise self.fail[prompts[0]]
            return [Completion(f"answer {p}", 1, 1) for p in prompts]
        finally:
            with self.lock:
                self.inflight -= 1


def test_as_they_arrive_a_held_call_does_not_hold_back_later_answers():
    backend = Scripted(concurrency=3)
    got = []

    def accept(u, c):
        got.append(u)
        if len(got) == 5:  # five later answers recorded while unit 0 is still out: now let it finish
            backend.release.set()

    error = drive(backend, range(12), str, accept, Tally("test"))
    assert error is None and sorted(got) == list(range(12)) and got[:5] == [1, 2, 3, 4, 5] and got.index(0) >= 5
    assert backend.most <= 3


def test_ordered_answers_keep_the_unit_order_within_a_bounded_lookahead():
    """Unit 0 is held until the driver asked for LOOKAHEAD * concurrency prompts: it must ask for that many (the
    lookahead is used), no more while 0 is out (the bound), and accept every answer in unit order."""
    backend = Scripted(concurrency=2, hold_until=LOOKAHEAD * 2)
    got = []

    def accept(u, c):
        got.append((u, c.text, len(backend.asked)))

    error = drive(backend, range(20), str, accept, Tally("test"), ordered=True)
    assert error is None and [g[:2] for g in got] == [(u, f"answer {u}") for u in range(20)]
    assert got[0][2] == LOOKAHEAD * 2 and backend.most <= 2


def test_an_unusable_answer_is_counted_and_a_hard_error_stops_new_calls():
    tally = Tally("test")
    backend = Scripted(concurrency=1, fail={"3": ResponseError("bad_shape", "no choices"), "5": OSError("disk")})
    backend.release.set()
    got = []
    error = drive(backend, range(10), str, lambda u, c: got.append(u), tally)
    assert isinstance(error, OSError) and got == [0, 1, 2, 4]
    assert tally.failed == {"bad_shape": 1} and tally.generations == 4 and backend.asked == ["0", "1", "2", "3", "4", "5"]
