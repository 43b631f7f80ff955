"""tests/tap.py: TAP lines for the Python parts of the shell tests (the
shell side is tests/tap.sh). A Tap counts from where the shell left off:

    t = Tap(first=9)           # nine lines printed by the shell before
    t.check("what holds", got, want)
    sys.exit(t.status())
"""


class Tap:
    def __init__(self, first=0):
        self.n, self.failed = first, 0

    def check(self, desc, got, want):
        self.n += 1
        if got == want:
            print(f"ok {self.n} - {desc}")
        else:
            self.failed += 1
            print(f"not ok {self.n} - {desc}\n# got:  {got!r}\n# want: {want!r}")

    def status(self):
        return 1 if self.failed else 0
