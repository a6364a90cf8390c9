"""cuvee: Common Crawl to a weighted, tokenized training mix, and a training run that says whether the mix is good."""

__version__ = "0.1.0"
