"""Identity stand-in for WeTextProcessing's normaliser (the v2 parity environment does the same).

WeTextProcessing compiles its grammars with pynini, which is not installable here; the vectors therefore
cover everything around the normaliser, not the normaliser itself.
"""


class Normalizer:
    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def normalize(self, text):
        return text
