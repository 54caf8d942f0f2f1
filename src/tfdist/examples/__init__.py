"""Example training scripts shipped with tfdist, so they run after a plain install:

    tfdist launch -n 2 -m tfdist.examples.digits --epochs 3
    tfdist example digits -o train.py     # a copy to edit
"""
