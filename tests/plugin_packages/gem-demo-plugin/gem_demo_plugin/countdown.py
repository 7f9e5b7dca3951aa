from gem_core import Env
from gem_core.errors import ResetNeeded


class CountdownEnv(Env):
    """Start at a random N in [3, 6]; each turn the agent must say the next number down."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = int(self.np_random.integers(3, 7))
        self.running = True
        return f"Count down from {self.n}. Say {self.n}.", {}

    def step(self, action):
        if not getattr(self, "running", False):
            raise ResetNeeded("CountdownEnv.step() before reset() or after the episode ended")
        if action.strip() != str(self.n):
            self.running = False
            return f"Expected {self.n}.", 0.0, True, False, {"success": False}
        self.n -= 1
        if self.n == 0:
            self.running = False
            return "Done!", 1.0, True, False, {"success": True}
        return f"Now say {self.n}.", 0.0, False, False, {}

    def sample_random_action(self):
        return str(int(self.np_random.integers(0, 7)))
