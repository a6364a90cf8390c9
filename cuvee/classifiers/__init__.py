"""classifiers"""
