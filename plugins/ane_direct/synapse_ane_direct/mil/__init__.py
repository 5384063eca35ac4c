"""MIL programs for the Neural Engine: generated from BERT weights, interpretable in numpy.

- :mod:`.program`: what a generated program is (its text and the weights it names);
- :mod:`.blob`: the weight file those names point into (Core ML's blob format);
- :mod:`.generator`: MiniLM to one program per sequence bucket;
- :mod:`.parser` and :mod:`.interpreter`: run exactly the generated operations.
"""
